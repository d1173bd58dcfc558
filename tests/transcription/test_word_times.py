"""Word timestamps (transcription.word_times): each token's time from the alignment heads' cross-attention by DTW
equals transformers' `generate(..., return_token_timestamps=True)` on the same tiny random Whisper and real speech
spoken by espeak-ng (a 3-second window), with the checkpoint's alignment_heads and with the upper half's heads
where it names none, for one recording and for a batch of two of different lengths, greedy and beam 3; the
words made of them equal those of the ASR pipeline's return_timestamps="word" with a WhisperTokenizer; the DTW
path and the median filter are transformers' own on matrices full of ties; a bad alignment_heads or input is one
sentence."""

import json
import shutil

import numpy as np
import pytest
import torch

import encdec
from encdec.audio import frame_lengths, log_mel
from encdec.errors import CheckpointError, ConfigError, DataError
from encdec.transcription.word_times import alignment_heads, dtw, median_filter, token_timestamps
from tests.audio.test_features import speak
from tests.generation import whisper_kit

transformers = pytest.importorskip("transformers")
generation_whisper = pytest.importorskip("transformers.models.whisper.generation_whisper")
pytestmark = pytest.mark.usefixtures("one_thread")

FRAMES = 300  # a 3-second window: max_source_positions 150
SHAPE = dict(num_mel_bins=80, max_source_positions=FRAMES // 2, max_target_positions=64)
SHAPE |= dict(decoder_layers=4, encoder_attention_heads=4, decoder_attention_heads=4)
HEADS = [[2, 1], [3, 0], [3, 3]]
UPPER_HALF = [[layer, head] for layer in (2, 3) for head in range(4)]
PROMPT = [whisper_kit.START, whisper_kit.LANGS["<|en|>"], whisper_kit.TASKS["transcribe"], whisper_kit.NO_TIMESTAMPS]
GREEDY = dict(language="en", max_new_tokens=30, suppress_tokens=[3, 4, *whisper_kit.TIMESTAMPS])  # one window


@pytest.fixture(scope="module")
def speech():
    """Two sentences spoken by espeak-ng, as log-mels of the 3-second window, and their frames."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt install espeak-ng); word times are checked on its speech")
    waves = [speak("Hello world, this is a short test."), speak("Hi there.", "en-gb-scotland")]
    return log_mel(waves, 80, frames=FRAMES), frame_lengths(waves, FRAMES)


def tiny_whisper(path, heads):
    """A random transformers Whisper saved in `path` with `heads` as its generation_config's alignment_heads (None:
    none written), and encdec's reading of the directory."""
    reference = whisper_kit.tiny_whisper(transformers, path, seed=5, **SHAPE)
    if heads is not None:
        config = json.loads((path / "generation_config.json").read_text())
        (path / "generation_config.json").write_text(json.dumps(config | {"alignment_heads": heads}))
    return reference, encdec.load_hf(path)


def transformers_times(reference, features, frames, heads, **options):
    """transformers' generate with return_token_timestamps, its frames read from the attention mask as its feature
    extractor gives it: the whole sequences (the prompt, then the tokens it returns) and the returned tokens'
    times."""
    reference.generation_config.alignment_heads = heads
    mask = (torch.arange(features.shape[-1]) < frames[:, None]).long()
    out = reference.generate(features, attention_mask=mask, return_token_timestamps=True, **GREEDY | options)
    prompt = torch.tensor([PROMPT] * len(features))
    return torch.cat([prompt, out["sequences"]], dim=1), out["token_timestamps"]


@pytest.mark.parametrize("beams", [1, 3], ids=["greedy", "beam-3"])
@pytest.mark.parametrize("named", [True, False], ids=["alignment-heads", "upper-half"])
@pytest.mark.parametrize("rows", [1, 2])
def test_token_times_equal_transformers_return_token_timestamps(tmp_path, speech, named, rows, beams, device, exact):
    """To the float on the CPU; on a GPU, whose sums may round otherwise, within the issue's 0.1 s."""
    features, frames = speech[0][:rows], speech[1][:rows]
    reference, model = tiny_whisper(tmp_path, HEADS if named else None)
    assert alignment_heads(model) == [tuple(pair) for pair in (HEADS if named else UPPER_HALF)]
    tokens, expected = transformers_times(reference, features, frames, HEADS if named else UPPER_HALF, num_beams=beams)
    assert torch.equal(model.generate(features, num_beams=beams, **GREEDY), tokens[:, 4:])  # encdec decodes them too
    model, features, tokens = model.to(device), features.to(device), tokens.to(device)
    times = token_timestamps(model, features, tokens, prompt_length=4, frames=frames.tolist())
    assert times.seconds.device == device and times.probabilities.device == device
    with torch.no_grad():  # the decoding's encoder output, where the caller has it: the same times
        encoded = model.encode(features)
    again = token_timestamps(model, features, tokens, prompt_length=4, frames=frames.tolist(), encoded=encoded)
    assert torch.equal(again.seconds, times.seconds) and torch.equal(again.probabilities, times.probabilities)
    gap = (times.seconds[:, 4:].cpu() - expected).abs().max().item()
    assert gap < (1e-6 if exact else 0.1 + 1e-6), (times.seconds, expected)
    assert len(set(times.seconds.flatten().tolist())) > 5  # the path moves: the times are not all one
    assert torch.equal(times.seconds[:, :4], torch.zeros(rows, 4))  # the prompt's


def test_probabilities_are_the_decoder_s_for_each_token_given_those_before(tmp_path, speech):
    reference, model = tiny_whisper(tmp_path, HEADS)
    features, frames = speech[0][:1], speech[1][:1]
    tokens, _ = transformers_times(reference, features, frames, HEADS)
    times = token_timestamps(model, features, tokens, prompt_length=4)
    with torch.no_grad():
        logits = reference(input_features=features, decoder_input_ids=tokens[:, :-1]).logits
    expected = logits.softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
    assert torch.allclose(times.probabilities[:, 4:], expected[:, 3:], atol=1e-5)
    assert torch.equal(times.probabilities[:, :4], torch.ones(1, 4))


@pytest.mark.parametrize("seed", range(4))
def test_the_warp_is_transformers_dynamic_time_warping_on_matrices_full_of_ties(seed, device):
    """Small integer costs make many equal sums, where the order of the tie rules decides the path."""
    rng = np.random.default_rng(seed)
    for rows, columns in [(1, 1), (1, 9), (7, 1), (6, 30), (25, 40)]:
        cost = rng.integers(-3, 3, size=(rows, columns)).astype(np.float64)
        cost[rng.random(cost.shape) < 0.1] += 0.1
        expected_rows, expected_columns = generation_whisper._dynamic_time_warping(cost)
        got_rows, got_columns = dtw(torch.from_numpy(cost).to(device))
        assert np.array_equal(got_rows, expected_rows) and np.array_equal(got_columns, expected_columns)


def test_the_median_filter_is_transformers():
    x = torch.randint(0, 4, (3, 5, 40), generator=torch.Generator().manual_seed(0)).float()
    for width in (1, 3, 7):
        assert torch.equal(median_filter(x, width), generation_whisper._median_filter(x, width))
    assert torch.equal(median_filter(x[..., :3], 7), x[..., :3])  # too short to reflect: as it is


@pytest.mark.parametrize(
    "heads, error, says",
    [
        ([[4, 0]], ConfigError, "names decoder layer 4, head 0, but the model has 4 decoder layers of 4"),
        ([[1, 4]], ConfigError, "names decoder layer 1, head 4"),
        ([[1]], CheckpointError, "whisper.alignment_heads must be None or 1 to 1024 pairs"),
        ([[1, -1]], CheckpointError, "whisper.alignment_heads must be"),
        ("all", CheckpointError, "whisper.alignment_heads must be"),
    ],
)
def test_alignment_heads_that_are_not_the_model_s_are_one_sentence(tmp_path, heads, error, says):
    _, model = tiny_whisper(tmp_path, heads)
    with pytest.raises(error, match=says):
        alignment_heads(model)


def test_bad_inputs_are_one_sentence(tmp_path, speech):
    _, model = tiny_whisper(tmp_path, HEADS)
    features, tokens = speech[0][:1], torch.tensor([[50, 52, 56, 60, 14, 51]])
    cases = [
        (dict(tokens=tokens[0]), "tokens must be a \\(batch, length\\) integer tensor"),
        (dict(tokens=tokens.float()), "tokens must be a \\(batch, length\\) integer tensor"),
        (dict(features=speech[0]), "features must be a \\(batch, mel bins, frames\\) tensor with 1 rows"),
        (dict(prompt_length=6), "prompt_length must be from 1 to 5"),
        (dict(prompt_length=0), "prompt_length must be from 1 to 5"),
        (dict(tokens=torch.tensor([[50, 52, 120]]), prompt_length=1), "tokens must be ids from 0 to 119"),
        (dict(tokens=torch.full((1, 70), 14)), "the tokens are 70 long but the model's decoder reads at most 64"),
        (dict(frames=FRAMES + 1), "frames must be one count, or one per row \\(1\\), each from 2 to 300"),
        (dict(frames=[100, 100]), "frames must be one count, or one per row"),
    ]
    with pytest.raises(ConfigError, match="names decoder layer 0, head 9"):
        token_timestamps(model, features, tokens, prompt_length=4, heads=[(0, 9)])
    for change, says in cases:
        arguments = dict(model=model, features=features, tokens=tokens, prompt_length=4) | change
        with pytest.raises(DataError, match=says):
            token_timestamps(**arguments)


def test_a_model_that_does_not_read_audio_is_one_sentence():
    from tests.generation.helpers import tiny

    with pytest.raises(ConfigError, match="cross-attention of a speech encoder-decoder \\(a Whisper\\)"):
        token_timestamps(tiny("t5"), torch.zeros(1, 8, 10), torch.tensor([[0, 5, 6]]), prompt_length=1)


SPECIALS = ["<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>"]
SPECIALS += ["<|nospeech|>", "<|notimestamps|>"]
SAID = " Hello world, this is a short test."


@pytest.fixture(scope="module")
def whisper_with_tokenizer(tmp_path_factory):
    """A tiny random Whisper with a WhisperTokenizer of its own (a byte a token; <|endoftext|>, the specials, then
    the 3-second window's 151 timestamps), both saved in one directory as a Hugging Face checkpoint holds them."""
    from tokenizers import pre_tokenizers

    path = tmp_path_factory.mktemp("whisper_with_tokenizer")
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = transformers.WhisperTokenizer(vocab={c: i for i, c in enumerate(alphabet)}, merges=[])
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIALS})
    tokenizer.add_tokens([f"<|{i * 0.02:.2f}|>" for i in range(FRAMES // 2 + 1)])
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in ["<|endoftext|>", *SPECIALS]}
    eos, start = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    reference = whisper_kit.tiny_whisper(
        transformers, path, seed=5, **SHAPE, vocab_size=len(tokenizer), decoder_start_token_id=start
    )
    reference.config.eos_token_id = reference.config.pad_token_id = reference.config.bos_token_id = eos
    generation = reference.generation_config
    generation.eos_token_id, generation.pad_token_id, generation.decoder_start_token_id = eos, eos, start
    generation.suppress_tokens, generation.begin_suppress_tokens = [], [eos]
    generation.no_timestamps_token_id, generation.prev_sot_token_id = ids["<|notimestamps|>"], ids["<|startofprev|>"]
    generation.lang_to_id = {"<|en|>": ids["<|en|>"]}
    generation.task_to_id = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    generation.alignment_heads = HEADS
    reference.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return reference, tokenizer, path


class Said(transformers.LogitsProcessor):
    """Makes generate write SAID, then <|endoftext|>: a random model's words are bytes without spaces."""

    def __init__(self, tokenizer, prompt_length: int):
        self.said = tokenizer.encode(SAID, add_special_tokens=False) + [tokenizer.eos_token_id]
        self.prompt_length = prompt_length

    def __call__(self, input_ids, scores):
        step = min(input_ids.shape[1] - self.prompt_length, len(self.said) - 1)
        forced = torch.full_like(scores, -torch.inf)
        forced[:, self.said[step]] = 0.0
        return forced


def test_words_equal_transformers_return_timestamps_word(whisper_with_tokenizer, speech):
    """encdec's tokenizer over the checkpoint's WhisperTokenizer, its words from our token times, equal the words
    the ASR pipeline's decoding (WhisperTokenizer._decode_asr, return_timestamps="word") makes of transformers'."""
    from encdec.tokenizers.pretrained import PretrainedTokenizer
    from encdec.transcription import Word
    from encdec.transcription.words import word_timestamps

    reference, tokenizer, path = whisper_with_tokenizer
    features, frames = speech[0][:1], speech[1][:1]
    mask = (torch.arange(FRAMES) < frames[:, None]).long()
    out = reference.generate(
        features,
        attention_mask=mask,
        return_token_timestamps=True,
        language="en",
        max_new_tokens=60,
        logits_processor=[Said(tokenizer, 4)],
    )
    _, chunks = tokenizer._decode_asr(
        [{"tokens": out["sequences"], "token_timestamps": out["token_timestamps"]}],
        return_timestamps="word",
        return_language=False,
        time_precision=0.02,
    )
    prompt = tokenizer.convert_tokens_to_ids(["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"])
    ended = torch.tensor([[tokenizer.eos_token_id]])  # returned without it, timed with it: its row times "."
    tokens = torch.cat([torch.tensor([prompt]), out["sequences"], ended], dim=1)  # the whole decoder sequence
    times = token_timestamps(encdec.load_hf(path), features, tokens, prompt_length=4, frames=frames.tolist())
    ours = PretrainedTokenizer(tokenizer)
    words = word_timestamps(ours, tokens[0].tolist(), times.seconds[0].tolist(), times.probabilities[0].tolist())
    expected = [(chunk["text"], *chunk["timestamp"]) for chunk in chunks["chunks"]]
    assert [(w.word, w.start, w.end) for w in words] == expected
    assert word_timestamps(tokenizer, tokens[0].tolist(), times.seconds[0].tolist()) == [  # transformers' own
        Word(w.word, w.start, w.end) for w in words
    ]
    assert "".join(w.word for w in words) == SAID and len({w.end for w in words}) > 3


def test_a_padded_batch_given_its_lengths_is_timed_as_its_rows_alone(tmp_path, speech):
    _, model = tiny_whisper(tmp_path, HEADS)
    features, frames = speech
    generator = torch.Generator().manual_seed(0)
    long, short = torch.randint(0, 50, (24,), generator=generator), torch.randint(0, 50, (9,), generator=generator)
    rows = [torch.tensor(PROMPT + text.tolist() + [whisper_kit.EOS]) for text in (long, short)]
    padded = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=whisper_kit.EOS)
    lengths = [len(row) for row in rows]
    together = token_timestamps(model, features, padded, 4, frames=frames.tolist(), lengths=lengths)
    for b, row in enumerate(rows):
        alone = token_timestamps(model, features[b : b + 1], row[None], 4, frames=frames[b : b + 1].tolist())
        assert torch.allclose(together.seconds[b, : lengths[b]], alone.seconds[0], atol=1e-6, rtol=0)
        assert torch.all(together.seconds[b, lengths[b] :] == alone.seconds[0, -1])  # padding: the row's last
    assert len(set(together.seconds.flatten().tolist())) > 5
    with pytest.raises(DataError, match="lengths must give each row's tokens \\(2\\), each from 5 to 29"):
        token_timestamps(model, features, padded, 4, lengths=[29, 4])
