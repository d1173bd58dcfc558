"""Speech corpora and the transcription objective: manifests (jsonl, TSV, a `datasets` Audio column) read as
(recording, transcript) pairs, and batches of log-mel features with Whisper's labels, SpecAugment drawn from the
batch's position."""

import json

import numpy as np
import pytest
import soundfile
import torch

from encdec.audio import log_mel, read_audio
from encdec.data.corpora import split_items
from encdec.data.documents import Documents
from encdec.data.formats import read_corpus
from encdec.data.objectives import build_objective
from encdec.data.objectives.transcribe import SpecAugment, Timestamps, TranscribeObjective, transcription_prompt
from encdec.errors import ConfigError, DataError
from encdec.generation.whisper_windows import split
from encdec.tokenizers import build_tokenizer
from encdec.training.run_config import load_config

RATE = 16_000
WHISPER_TOKENS = ("<|startoftranscript|>", "<|en|>", "<|de|>", "<|transcribe|>", "<|translate|>", "<|notimestamps|>")


def tone(path, seconds: float, hz: float, rate: int = RATE):
    """A sine of `hz` written as 16-bit PCM: a recording whose spectrum is known."""
    t = np.arange(int(seconds * rate)) / rate
    soundfile.write(path, 0.3 * np.sin(2 * np.pi * hz * t), rate, subtype="PCM_16")
    return path


@pytest.fixture
def clips(tmp_path):
    (tmp_path / "clips").mkdir()
    texts = ["a dog runs", "two men sit on a bench", "the girl reads", "snow falls"]
    paths = [tone(tmp_path / "clips" / f"{i}.wav", 0.5 + 0.5 * i, 200 + 100 * i) for i in range(len(texts))]
    return tmp_path, paths, texts


def test_a_jsonl_manifest_names_recordings_from_its_own_folder(clips):
    root, paths, texts = clips
    absolute = str(paths[3])
    lines = [{"audio": f"clips/{p.name}", "text": t} for p, t in zip(paths[:3], texts)]
    lines.append({"audio": absolute, "text": ["snow", "falls"]})
    (root / "train.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    pairs = list(read_corpus("speech-jsonl", [root / "train.jsonl"]))
    assert pairs == [(str(p), t) for p, t in zip(paths, texts)]


def test_a_tsv_manifest_and_its_fields_by_name(clips):
    root, paths, texts = clips
    (root / "train.tsv").write_text("path\ttext\n" + "".join(f"clips/{p.name}\t{t}\n" for p, t in zip(paths, texts)))
    assert list(read_corpus("speech-tsv", [root / "train.tsv"], header=True)) == list(zip(map(str, paths), texts))
    (root / "named.jsonl").write_text(json.dumps({"wav": f"clips/{paths[0].name}", "sentence": "a dog runs"}) + "\n")
    pairs = list(read_corpus("speech-jsonl", [root / "named.jsonl"], audio_field="wav", text_field="sentence"))
    assert pairs == [(str(paths[0]), "a dog runs")]


def test_a_manifest_without_its_recording_field_is_one_sentence(tmp_path):
    (tmp_path / "bad.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl line 1 has no field 'audio' for its recording"):
        list(read_corpus("speech-jsonl", [tmp_path / "bad.jsonl"]))


def test_a_datasets_audio_column_is_read_undecoded_and_split_by_its_bytes(clips):
    datasets = pytest.importorskip("datasets")
    from encdec.data.datasets_corpus import dataset_items, open_dataset

    root, paths, texts = clips
    table = datasets.Dataset.from_dict({"audio": [str(p) for p in paths], "text": texts})
    table.cast_column("audio", datasets.Audio()).save_to_disk(str(root / "saved"))
    rows = open_dataset(str(root / "saved"), "train")
    pairs = list(dataset_items(rows, "saved", True, source_field="audio", target_field="text", recordings=True))
    assert [t for _, t in pairs] == texts
    assert all(isinstance(audio, bytes) for audio, _ in pairs)  # embedded by save_to_disk
    assert pairs[0][0] == paths[0].read_bytes()
    train, validation = split_items(pairs, 0.5)
    assert sorted(train + validation, key=lambda pair: texts.index(pair[1])) == pairs


def whisper_tokenizer(previous: bool = False):
    """A byte tokenizer with Whisper's prompt tokens (and <|startofprev|>, where `previous`)."""
    names = (*WHISPER_TOKENS[:-1], "<|startofprev|>", WHISPER_TOKENS[-1]) if previous else WHISPER_TOKENS
    return build_tokenizer("byte", extra_specials=names)


def test_the_prompt_is_whisper_s_where_the_tokenizer_holds_its_tokens():
    tok = whisper_tokenizer()
    ids = {name: tok.special_id(name) for name in WHISPER_TOKENS}
    start, prompt = transcription_prompt(tok, "en", "transcribe")
    assert start == ids["<|startoftranscript|>"]
    assert prompt == (ids["<|en|>"], ids["<|transcribe|>"], ids["<|notimestamps|>"])
    assert transcription_prompt(tok, "de", "translate")[1] == (
        ids["<|de|>"],
        ids["<|translate|>"],
        ids["<|notimestamps|>"],
    )
    assert transcription_prompt(tok, None) == (start, (ids["<|notimestamps|>"],))  # English-only: no language, no task
    plain = build_tokenizer("byte")
    assert transcription_prompt(plain, None) == (plain.decoder_start_id, ())
    with pytest.raises(ConfigError, match="objective.language en is a Whisper prompt token"):
        transcription_prompt(plain, "en")
    with pytest.raises(ConfigError, match="no token <\\|fr\\|>"):
        transcription_prompt(tok, "fr")
    with pytest.raises(ConfigError, match="objective.task translate needs objective.language"):
        transcription_prompt(tok, None, "translate")


def objective(paths, texts, tok, **options) -> TranscribeObjective:
    start, prompt = transcription_prompt(tok, "en")
    ids = Documents.from_lists(tok.encode(texts), np.int32)
    return build_objective(
        "transcribe", (list(map(str, paths)), ids), tok, 2, 3, prompt=prompt, decoder_start=start, **options
    )


def test_a_batch_is_the_recordings_log_mels_and_whisper_s_labels(clips):
    _, paths, texts = clips
    tok = whisper_tokenizer()
    data = objective(paths, texts, tok, max_target_len=64)
    batch = data.batch_at(0, 0)
    assert batch.src_ids.shape == (2, 80, 3000) and batch.src_ids.dtype == torch.float32 and batch.src_mask is None
    start, prompt = transcription_prompt(tok, "en")
    for row in range(2):
        labels = batch.labels[row][batch.labels[row] != -100].tolist()
        assert labels[:3] == list(prompt) and labels[-1] == tok.eos_id
        text = tok.decode(labels[3:-1])
        i = texts.index(text)
        assert torch.equal(batch.src_ids[row], log_mel([read_audio(paths[i])])[0])
        assert batch.tgt_ids[row, 0] == start and batch.tgt_ids[row, 1 : len(labels)].tolist() == labels[:-1]
    assert torch.equal(data.batch_at(0, 0).src_ids, batch.src_ids)  # a pure function of the position


def test_a_transcript_is_cut_to_fit_beside_its_prompt_and_eos(clips):
    _, paths, texts = clips
    tok = whisper_tokenizer()
    batch = objective(paths, texts, tok, max_target_len=8).batch_at(0, 0)
    assert batch.labels.shape[1] == 8 and (batch.labels[:, -1] == tok.eos_id).all()
    with pytest.raises(ConfigError, match="leaves no room for a transcript"):
        objective(paths, texts, tok, max_target_len=4)


def test_spec_augment_masks_each_row_by_its_position_within_its_recording(clips):
    _, paths, texts = clips
    tok = whisper_tokenizer()
    policy = SpecAugment(freq_masks=2, freq_width=10, time_masks=2, time_width=40, time_fraction=0.5)
    plain, masked = objective(paths, texts, tok), objective(paths, texts, tok, spec_augment=policy)
    for step in range(2):
        clean, noisy = plain.batch_at(0, step).src_ids, masked.batch_at(0, step).src_ids
        changed = noisy != clean
        assert changed.any() and (noisy[changed] == 0).all()  # masked to 0, the rest untouched
        assert torch.equal(masked.batch_at(0, step).src_ids, noisy)  # drawn again exactly: resume is bitwise
        frames = changed.all(dim=1)  # (B, F): whole time columns masked
        for row in range(2):
            recorded = int(torch.nonzero(clean[row].std(dim=0) > 0).max()) + 1  # frames holding the tone's onset
            masked_frames = torch.nonzero(frames[row]).flatten()
            assert masked_frames.numel() == 0 or int(masked_frames.max()) < recorded + 2
    assert not torch.equal(masked.batch_at(0, 0).src_ids, masked.batch_at(1, 0).src_ids)


def test_a_recording_longer_than_a_window_is_one_sentence(tmp_path):
    path = tone(tmp_path / "long.wav", 31, 300, rate=8000)
    tok = whisper_tokenizer()
    with pytest.raises(DataError, match="long.wav"):
        objective([path, path], ["x", "y"], tok).batch_at(0, 0)


def test_the_state_resumes_where_it_stopped(clips):
    _, paths, texts = clips
    tok = whisper_tokenizer()
    first = objective(paths, texts, tok)
    [first.next_batch() for _ in range(3)]
    again = objective(paths, texts, tok)
    again.load_state_dict(first.state_dict())
    assert torch.equal(again.next_batch().labels, first.next_batch().labels)


def test_timestamps_join_a_batch_s_recordings_into_windows_with_whisper_s_times(clips):
    """objective.timestamps: the batch's four clips (0.5 to 2 s) in one window, silences drawn between them; each
    text between its start and end tokens, 20 ms apart from the token after <|notimestamps|>, its span the
    clip's length; drawn again exactly from the position (resume); fraction 0: the texts after <|notimestamps|>."""
    _, paths, texts = clips
    tok = whisper_tokenizer()
    start, prompt = transcription_prompt(tok, "en")
    ids = Documents.from_lists(tok.encode(texts), np.int32)
    first = tok.special_id("<|notimestamps|>") + 1  # <|0.00|>

    def joined(**options):
        return build_objective(
            "transcribe",
            (list(map(str, paths)), ids),
            tok,
            4,
            3,
            prompt=prompt,
            decoder_start=start,
            no_timestamps_id=first - 1,
            max_target_len=128,
            **options,
        )

    data = joined(timestamps=Timestamps(fraction=1.0, most=8, gap=0.5))
    batch = data.batch_at(0, 0)
    assert batch.src_ids.shape == (1, 80, 3000)
    labels = batch.labels[0][batch.labels[0] != -100].tolist()
    assert labels[:2] == list(prompt[:2]) and labels[-1] == tok.eos_id  # <|en|> <|transcribe|>, no <|notimestamps|>
    times = [i for i, token in enumerate(labels) if token >= first]
    assert len(times) == 8
    spans = [(labels[a] - first, labels[b] - first) for a, b in zip(times[::2], times[1::2])]
    said = [tok.decode(labels[a + 1 : b]) for a, b in zip(times[::2], times[1::2])]
    assert all(text.startswith(" ") for text in said)  # each segment's text after a space, as Whisper writes it
    said = [text[1:] for text in said]
    assert sorted(said) == sorted(texts)
    for (begin, end), text in zip(spans, said):
        seconds = 0.5 + 0.5 * texts.index(text)
        assert abs((end - begin) * 0.02 - seconds) <= 0.02 and begin >= 0
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # in order, a silence of at most 0.5 s between
    assert all(b[0] - a[1] <= 0.5 / 0.02 + 1 for a, b in zip(spans, spans[1:]))
    assert torch.equal(data.batch_at(0, 0).src_ids, batch.src_ids) and torch.equal(
        data.batch_at(0, 0).labels, batch.labels
    )
    plain = joined(timestamps=Timestamps(fraction=0.0, gap=0.5)).batch_at(0, 0)
    text = plain.labels[0][plain.labels[0] != -100].tolist()
    assert text[:3] == list(prompt) and text[-1] == tok.eos_id and not any(t >= first for t in text[3:-1])
    words = tok.decode(text[3:-1]).split(" ")  # the texts one after another, a space between: no word glued
    assert sorted(words) == sorted(word for line in texts for word in line.split(" "))
    alone = joined(timestamps=Timestamps(fraction=1.0, most=1)).batch_at(0, 0)
    assert alone.src_ids.shape[0] == 4  # one recording a window: each its own times from <|0.00|>
    assert (alone.labels[:, 2] == first).all()
    with pytest.raises(ConfigError, match="objective.timestamps writes Whisper's timestamp tokens"):
        build_objective("transcribe", (list(map(str, paths)), ids), tok, 4, 3, timestamps=Timestamps())


def timed(paths, texts, tok, timestamps, frames=300, batch=6):
    """The transcribe objective joining `batch` recordings a step into `frames`-frame windows (300: 3 s)."""
    start, prompt = transcription_prompt(tok, "en")
    ids = Documents.from_lists(tok.encode(texts), np.int32)
    return build_objective(
        "transcribe",
        (list(map(str, paths)), ids),
        tok,
        batch,
        3,
        prompt=prompt,
        decoder_start=start,
        no_timestamps_id=tok.special_id("<|notimestamps|>"),
        previous_id=tok.special_id("<|startofprev|>"),
        max_target_len=128,
        frames=frames,
        timestamps=timestamps,
    )


@pytest.fixture
def sentences(tmp_path):
    """Six tones of 1.2 to 2.2 s, each its own pitch, named by their texts: two fit a 3-s window at most."""
    texts = ["a dog runs", "two men sit", "the girl reads", "snow falls", "a cat naps", "the sun sets"]
    paths = [tone(tmp_path / f"{i}.wav", 1.2 + 0.2 * i, 300 + 250 * i) for i in range(len(texts))]
    return paths, texts


def rows_of(batch):
    return [row[row != -100].tolist() for row in batch.labels]


def heard(features: torch.Tensor) -> torch.Tensor:
    """(M, F) log-mel -> (F,) whether each frame holds sound (silence's frames are one constant)."""
    return features.std(dim=0) > 1e-3


def test_lead_puts_a_drawn_silence_before_a_window_s_first_recording_and_counts_times_from_the_window(sentences):
    """objective.timestamps.lead: each window's first recording starts after up to `lead` seconds of silence;
    its first timestamp is that silence (not <|0.00|>) and its audio starts there; its span stays its length."""
    paths, texts = sentences
    tok = whisper_tokenizer()
    first = tok.special_id("<|notimestamps|>") + 1
    data = timed(paths, texts, tok, Timestamps(fraction=1.0, most=1, gap=0.0, lead=1.0))
    leads = []
    for step in range(3):
        batch = data.batch_at(step, 0)  # one batch an epoch
        for labels, features in zip(rows_of(batch), batch.src_ids):
            begin, end = labels[2] - first, labels[-2] - first  # <|en|> <|transcribe|> <|t0|> text <|t1|> EOS
            seconds = 1.2 + 0.2 * texts.index(tok.decode(labels[3:-2]).removeprefix(" "))
            assert 0 <= begin <= 1.0 / 0.02 and abs((end - begin) * 0.02 - seconds) <= 0.02
            onset = int(torch.nonzero(heard(features)).min())
            assert abs(onset - 2 * begin) <= 3  # the audio starts where its timestamp says (10-ms frames)
            leads.append(begin)
    assert len(leads) == 18 and len(set(leads)) > 9 and max(leads) > 25  # drawn, up to a second
    plain = timed(paths, texts, tok, Timestamps(fraction=1.0, most=1, gap=0.0)).batch_at(0, 0)
    assert all(labels[2] == first for labels in rows_of(plain))  # lead 0: today's windows from <|0.00|>


def test_a_cut_window_ends_inside_the_next_recording_with_its_start_time_alone(sentences):
    """objective.timestamps.cut 1: a window whose next recording runs past its end holds that recording's first
    part up to the window's end, and its labels end <|t_end|> <|t_cut|> EOS; the cut recording starts the next
    window whole. Read back by encdec's own long-form rule, such a decoding moves to <|t_end|>, not a window on."""
    paths, texts = sentences
    tok = whisper_tokenizer()
    first = tok.special_id("<|notimestamps|>") + 1
    data = timed(paths, texts, tok, Timestamps(fraction=1.0, most=8, gap=0.5, cut=1.0))
    cuts = 0
    for step in range(2):
        batch = data.batch_at(step, 0)  # one batch an epoch
        rows = rows_of(batch)
        said = []
        for row, labels in enumerate(rows):
            tokens = labels[2:-1]  # after <|en|> <|transcribe|>, EOS cut as long form cuts it
            pieces, moved = split(tokens, first, 300)
            said += [tok.decode([t for t in piece if t < first]) for piece in pieces]
            sound = heard(batch.src_ids[row])
            if tokens[-2] < first:  # text <|t_end|>: whole recordings, the decoding moves a whole window on
                assert moved == 300
                continue
            cuts += 1
            t_end, t_cut = tokens[-2] - first, tokens[-1] - first
            assert t_end <= t_cut and 0.02 * t_cut <= 3.0 - 0.5  # after its gap, 0.5 s of it at least
            assert moved == 2 * t_end  # long form reads on from the last whole segment's end
            assert sound[-3:].all() and sound[2 * t_cut + 3 : -1].all()  # sound from the cut start to the end
            pitch = batch.src_ids[row][:, -5:].mean(dim=1).argmax()  # the cut recording's tone ...
            onset = int(torch.nonzero(heard(batch.src_ids[row + 1])).min())
            assert batch.src_ids[row + 1][:, onset + 5 : onset + 10].mean(dim=1).argmax() == pitch  # ... opens the next
        assert sorted(text.removeprefix(" ") for text in said) == sorted(texts)  # each whole once, none cut
    assert cuts >= 4
    never = timed(paths, texts, tok, Timestamps(fraction=1.0, most=8, gap=0.5, cut=0.0))
    assert all(labels[-3] < first for labels in rows_of(never.batch_at(0, 0)))  # cut 0: no window ends in a pair
    plain = timed(paths, texts, tok, Timestamps(fraction=0.0, most=8, gap=0.5, cut=1.0)).batch_at(0, 0)
    words = [tok.decode(labels[3:-1]) for labels in rows_of(plain)]
    # without timestamps a window keeps no cut recording: none of its sound without its text
    assert not any(heard(features)[-3:].all() for features in plain.src_ids)
    assert sorted(w for line in words for w in line.split()) == sorted(w for t in texts for w in t.split())


def test_cut_draws_its_share_of_the_windows_that_overrun_and_places_half_a_second_at_least():
    """Timestamps.join on 2-s recordings in a 3-s window, no gap: each window's next recording overruns by 1 s,
    so `cut` is the share of windows that end inside it; 0.3 s left before the end is too little to place."""
    waves, texts = [torch.ones(2 * RATE)] * 201, [np.array([5])] * 201
    window = 3 * RATE

    def windows(cut, seed=0, waves=waves):
        return Timestamps(most=8, gap=0.0, cut=cut).join(waves, texts, window, 100, np.random.default_rng(seed))

    for cut, lo, hi in [(0.0, 0, 0), (1.0, 200, 200), (0.3, 45, 75)]:
        made = windows(cut)
        assert len(made) == 201 and sum(w.cut is not None for w in made) in range(lo, hi + 1)
        for w in made:
            assert [start for start, _ in w.placed[:1]] == [0] and len(w.texts) == 1
            if w.cut is not None:
                assert w.placed[1][0] == w.cut == 2 * RATE and len(w.placed[1][1]) == RATE  # up to the window's end
    assert [w.cut for w in windows(0.3)] == [w.cut for w in windows(0.3)]  # drawn again exactly from the rng
    short = windows(1.0, waves=[torch.ones(int(2.7 * RATE)), torch.ones(2 * RATE)])
    assert [w.cut for w in short] == [None, None] and len(short[0].placed) == 1


def test_lead_and_cut_are_drawn_again_from_the_position_and_resume_bitwise(sentences):
    paths, texts = sentences
    tok = whisper_tokenizer()
    tok = whisper_tokenizer(previous=True)
    policy = Timestamps(fraction=0.5, most=8, gap=0.5, lead=1.0, cut=0.5, previous=0.5)
    first = timed(paths, texts, tok, policy)
    again = timed(paths, texts, tok, policy)
    for step in range(2):
        a, b = first.batch_at(step, 0), again.batch_at(step, 0)
        assert torch.equal(a.src_ids, b.src_ids) and torch.equal(a.labels, b.labels)
    first.next_batch()
    resumed = timed(paths, texts, tok, policy)
    resumed.load_state_dict(first.state_dict())
    a, b = first.next_batch(), resumed.next_batch()
    assert torch.equal(a.src_ids, b.src_ids) and torch.equal(a.labels, b.labels)


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("lead", -0.5, "objective.timestamps.lead"),
        ("lead", 11, "objective.timestamps.lead"),
        ("cut", 1.5, "objective.timestamps.cut"),
        ("cut", "often", "objective.timestamps.cut"),
        ("previous", 1.5, "objective.timestamps.previous"),
        ("previous", -0.1, "objective.timestamps.previous"),
        ("previous", "half", "objective.timestamps.previous"),
    ],
)
def test_lead_and_cut_out_of_their_ranges_are_one_sentence(tmp_path, key, value, says):
    path = tmp_path / "config.yaml"
    path.write_text(f"objective:\n  kind: transcribe\n  timestamps: {{{key}: {value}}}\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert says in str(error.value) and "\n" not in str(error.value)


def test_previous_prompts_a_window_with_the_earlier_windows_text_read_but_not_learned(sentences):
    """objective.timestamps.previous 1: each window but a batch's first is read after <|startofprev|> and the last
    tokens of the earlier windows' texts (labels less prompt and EOS, timestamps kept), as long form prompts a
    window with condition_on_prev_tokens; those tokens and <|startoftranscript|> are not learned, and the window's
    labels and audio are the same as without them. The prompt keeps max_target_len // 2 - 1 tokens at most and
    as many as fit beside the labels."""
    paths, texts = sentences
    tok = whisper_tokenizer(previous=True)
    previous, start = tok.special_id("<|startofprev|>"), tok.special_id("<|startoftranscript|>")
    policy = dict(fraction=0.5, most=2, gap=0.5, lead=0.5, cut=0.5)
    prompted = 0
    for step in range(3):
        plain = timed(paths, texts, tok, Timestamps(**policy)).batch_at(step, 0)
        batch = timed(paths, texts, tok, Timestamps(**policy, previous=1.0)).batch_at(step, 0)
        assert torch.equal(batch.src_ids, plain.src_ids)
        bodies = [labels[2 + (labels[2] == tok.special_id("<|notimestamps|>")) : -1] for labels in rows_of(plain)]
        for row, labels in enumerate(rows_of(plain)):
            read, learned = batch.tgt_ids[row].tolist(), batch.labels[row].tolist()
            begins = read.index(start)
            assert learned[:begins] == [-100] * begins and rows_of(batch)[row] == labels
            assert read[begins + 1 : begins + len(labels)] == labels[:-1]  # the labels shifted, as without it
            history = [t for body in bodies[:row] for t in body]
            kept = min(128 // 2 - 1, 128 - len(labels) - 1, len(history))
            assert read[:begins] == ([previous, *history[-kept:]] if row and kept else [])
            assert begins + len(labels) <= 128
            prompted += begins > 0
    assert prompted >= 6
    never = timed(paths, texts, tok, Timestamps(**policy, previous=0.0)).batch_at(0, 0)
    assert (never.tgt_ids[:, 0] == start).all()
    half = [timed(paths, texts, tok, Timestamps(**policy, previous=0.5)).batch_at(s, 0) for s in range(8)]
    drawn = [int(b.tgt_ids[r, 0] == previous) for b in half for r in range(1, len(b.tgt_ids))]
    assert 0 < sum(drawn) < len(drawn)  # a share of the windows, drawn


def test_previous_with_a_tokenizer_without_startofprev_is_one_sentence(sentences):
    paths, texts = sentences
    with pytest.raises(ConfigError) as error:
        timed(paths, texts, whisper_tokenizer(), Timestamps(previous=0.5))
    assert "objective.timestamps.previous" in str(error.value) and "\n" not in str(error.value)
