"""Temperature fallback: rows decoded again at the next temperature where their output compresses too well or
their average log-probability is too low, as transformers' Whisper does it (its own generate, token for token,
sampled passes included, drawing from torch's generator as transformers does), and on a text model as on speech."""

import pytest
import torch

import encdec
from encdec.errors import ConfigError
from encdec.generation.fallback import average_logprob, compression_ratio

from . import whisper_kit
from .helpers import V, tiny

transformers = pytest.importorskip("transformers")
TEMPERATURES = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]


def test_compression_ratio_and_average_logprob_are_transformers():
    from transformers.models.whisper.generation_whisper import WhisperGenerationMixin as Mixin

    generator = torch.Generator().manual_seed(0)
    for length in (2, 5, 40):
        tokens = torch.randint(0, 51865, (length,), generator=generator)
        tokens[length // 2 :] = tokens[0]  # some repetition
        assert compression_ratio(tokens.tolist(), 51865) == Mixin._retrieve_compression_ratio(tokens, 51865)
        steps = [torch.randn(300, generator=generator) for _ in range(length + 2)]
        ids = tokens[: length - 1] % 300
        for temperature in (0.0, 0.6):
            expected = Mixin._retrieve_avg_logprobs(steps, ids, temperature)
            assert average_logprob(torch.stack(steps), ids.tolist(), temperature) == float(expected)


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    path = tmp_path_factory.mktemp("whisper")
    reference = whisper_kit.tiny_whisper(transformers, path)
    return reference, whisper_kit.Steppable(reference), whisper_kit.defaults_of(path)


NO_TIMESTAMPS = dict(suppress_tokens=[3, 4, *whisper_kit.TIMESTAMPS])
CASES = {  # thresholds the tiny model's greedy rows fall on either side of (compression ~0.6-0.8, logprob -1.2..-1.8)
    "compression": dict(compression_ratio_threshold=0.62),
    "logprob": dict(logprob_threshold=-1.5),
    "both": dict(compression_ratio_threshold=0.7, logprob_threshold=-1.6),
    "no-speech": dict(logprob_threshold=-1.45, no_speech_threshold=0.012),  # <|nospeech|> 4e-3..3e-2 here
    "beam-first": dict(compression_ratio_threshold=0.62, num_beams=3),
    "beam-logprob": dict(logprob_threshold=-1.2, num_beams=3),
}


@pytest.mark.parametrize("options", CASES.values(), ids=CASES)
def test_fallback_equals_transformers_whisper(whisper, options):
    reference, ours, defaults = whisper
    options = dict(options, language="en", max_new_tokens=12, **NO_TIMESTAMPS)
    starts, skipped = [], 0
    for seed in range(3):
        x = torch.randn(4, 8, 60, generator=torch.Generator().manual_seed(seed))
        torch.manual_seed(seed)
        expected = reference.generate(x, temperature=tuple(TEMPERATURES), **options)
        torch.manual_seed(seed)
        ours.starts = 0
        got = encdec.generate(ours, x, defaults=defaults, temperature=TEMPERATURES, **options)
        assert torch.equal(got, expected.long()), (seed, got, expected)  # floats where transformers dropped a row
        skipped += int((got == whisper_kit.EOS).all(dim=1).sum())
        starts.append(ours.starts - ("no_speech_threshold" in options))  # <|nospeech|>'s step has a start of its own
    assert max(starts) > 1  # some rows were decoded again
    assert skipped > 0 if "no_speech_threshold" in options else skipped == 0  # rows without speech: empty


def test_a_text_model_falls_back_as_speech_does():
    """Every row failing the compression test at 0 is sampled at 0.5: as plain sampling with that seed."""
    model = tiny("t5")
    src = torch.randint(3, V, (3, 9))
    options = dict(max_new_tokens=8, eos_token_id=V - 1, pad_token_id=V - 2, seed=4)
    got = encdec.generate(model, src, temperature=[0.0, 0.5], compression_ratio_threshold=1e-3, **options)
    assert torch.equal(got, encdec.generate(model, src, do_sample=True, temperature=0.5, **options))
    kept = encdec.generate(model, src, temperature=[0.0, 0.5], compression_ratio_threshold=1e6, **options)
    assert torch.equal(kept, encdec.generate(model, src, **options))


@pytest.mark.parametrize(
    "options, error",
    [
        (dict(temperature=[0.0, 0.5], num_beams=2, num_return_sequences=2), "keeps one output per input"),
        (
            dict(temperature=[0.0], logprob_threshold=-1.0, num_beams=2, num_beam_groups=2, diversity_penalty=0.5),
            "not diverse beam search",
        ),
        (dict(temperature=[0.0], no_speech_threshold=0.5, logprob_threshold=-1.0), "an option of Whisper's rules"),
    ],
)
def test_what_a_fallback_cannot_do_is_one_sentence(options, error):
    with pytest.raises(ConfigError, match=error):
        encdec.generate(tiny("t5"), torch.randint(3, V, (2, 5)), **options)


def test_no_speech_without_logprob_threshold_is_one_sentence(whisper):
    _, ours, defaults = whisper
    with pytest.raises(ConfigError, match="no_speech_threshold needs logprob_threshold"):
        encdec.generate(ours, torch.randn(1, 8, 60), defaults=defaults, language="en", no_speech_threshold=0.5)


@pytest.mark.parametrize("options", [dict(num_beams=4), dict(num_beams=3, num_return_sequences=2, length_penalty=-1.0)])
def test_beam_indices_are_hugging_faces(tmp_path, options):
    """The rows a beam search's tokens were chosen from, which the fallback scores a beam decoding by."""
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, decoder_start_token_id=0
    )
    reference = transformers.T5ForConditionalGeneration(config).eval()
    with torch.no_grad():  # weights large enough that rows differ and beams change places
        for weight in reference.parameters():
            weight.normal_(0, 0.3) if weight.dim() > 1 else None
    reference.save_pretrained(tmp_path)
    ours = encdec.load_hf(tmp_path)
    src = torch.randint(2, 99, (3, 10), generator=torch.Generator().manual_seed(1))
    eos = int(reference.generate(input_ids=src, max_new_tokens=9, **options)[0, 3])  # rows end at different steps
    options = dict(options, max_new_tokens=9, eos_token_id=eos, return_dict_in_generate=True, output_scores=True)
    expected = reference.generate(input_ids=src, **options)
    got = encdec.generate(ours, src, **options)
    assert torch.equal(got.sequences, expected.sequences)
    assert torch.equal(got.beam_indices, expected.beam_indices[:, : got.beam_indices.shape[1]])
    if options["num_beams"] == 3:  # short hypotheses favoured: one shorter than the search, its steps after -1
        assert (got.beam_indices == -1).any()
