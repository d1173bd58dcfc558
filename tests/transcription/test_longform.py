"""Long-form transcription equals transformers' Whisper long-form `generate` (return_segments) segment for segment:
the same tokens and times within 0.1 s, on espeak-ng speech several windows long read by a tiny random Whisper
(window 0.6 s: 30 source positions), greedy and beam, with the previous text as prompt, with temperature fallback
and no-speech detection; a batch of recordings decodes as each does alone."""

import shutil
import subprocess
from types import SimpleNamespace

import pytest
import torch

import encdec
from encdec.audio import log_mel, read_audio
from encdec.errors import ConfigError
from encdec.transcription.longform import Transcriber
from tests.generation import whisper_kit

transformers = pytest.importorskip("transformers")
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs apt's espeak-ng to speak the recordings"),
]
SENTENCES = ["A dog runs in the snow.", "Two men sit on a bench and talk about the weather today."]


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    path = tmp_path_factory.mktemp("whisper")
    return whisper_kit.tiny_whisper(transformers, path), encdec.load_hf(path)


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> list[torch.Tensor]:
    """Each sentence spoken by espeak-ng: 1.5 to 4 s, three to seven windows."""
    root, waves = tmp_path_factory.mktemp("speech"), []
    for i, text in enumerate(SENTENCES):
        wav = root / f"{i}.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "170", "-w", str(wav), text], check=True)
        waves.append(read_audio(wav))
    return waves


def features(waves) -> tuple[torch.Tensor, list[int]]:
    frames = [len(wave) // 160 for wave in waves]
    out = torch.zeros(len(waves), 8, max(frames))
    for row, wave in enumerate(waves):
        out[row, :, : frames[row]] = log_mel(wave, 8, frames=frames[row])[0]
    return out, frames


CASES = {
    "greedy": dict(language="en"),
    "detected": dict(),
    "beam": dict(language="fr", num_beams=3),
    "previous-text": dict(language="en", condition_on_prev_tokens=True),
    "fallback": dict(
        language="de",
        temperature=(0.0, 0.4, 0.8),
        compression_ratio_threshold=1.1,
        logprob_threshold=-1.0,
        condition_on_prev_tokens=True,
    ),
    "no-speech": dict(
        language="en",
        temperature=(0.0,),
        logprob_threshold=-1.0,
        no_speech_threshold=0.03,  # <|nospeech|> 5e-3..4e-2 here: some windows skipped, most kept
        condition_on_prev_tokens=True,
    ),
    "initial-prompt": dict(language="en", prompt_ids=(whisper_kit.PREV, 9, 10, 11)),
    "initial-prompt-carried": dict(
        language="en", prompt_ids=(whisper_kit.PREV, 9, 10, 11), condition_on_prev_tokens=True
    ),
}


def theirs(reference, x, frames, options) -> list[list[tuple[list[int], float, float]]]:
    mask = torch.arange(x.shape[-1])[None] < torch.tensor(frames)[:, None]
    if "prompt_ids" in options:
        options = {**options, "prompt_ids": torch.tensor(options["prompt_ids"])}
    out = reference.generate(
        x, attention_mask=mask.long(), return_timestamps=True, return_segments=True, max_new_tokens=10, **options
    )
    return [[(s["tokens"].tolist(), float(s["start"]), float(s["end"])) for s in row] for row in out["segments"]]


def listed(options: dict) -> dict:
    """transformers' tuples of temperatures and prompt ids as encdec's options take them: lists."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}


def ours(model, x, frames, options) -> list[list[tuple[list[int], float, float]]]:
    transcriber = Transcriber(model, max_new_tokens=10, **listed(options))
    prompts, encoded = transcriber.prompts(x)
    segments = transcriber.decode(x, frames, prompts, encoded=encoded)
    return [[(list(s.tokens), s.start, s.end) for s in row] for row in segments]


def assert_same(got, expected):
    assert [[tokens for tokens, _, _ in row] for row in got] == [[tokens for tokens, _, _ in row] for row in expected]
    for row, theirs_row in zip(got, expected):
        for (_, start, end), (_, their_start, their_end) in zip(row, theirs_row):
            assert abs(start - their_start) < 0.1 and abs(end - their_end) < 0.1


@pytest.mark.parametrize("options", CASES.values(), ids=CASES)
def test_segments_equal_transformers_long_form(whisper, speech, options):
    reference, model = whisper
    for wave in speech:
        x, frames = features([wave])
        torch.manual_seed(0)
        expected = theirs(reference, x, frames, options)
        torch.manual_seed(0)
        got = ours(model, x, frames, options)
        assert_same(got, expected)
        assert len(got[0]) > 1  # several windows, several segments


@pytest.mark.parametrize(
    "options", [CASES["greedy"], CASES["beam"], CASES["fallback"]], ids=["greedy", "beam", "fallback"]
)
def test_a_recording_of_one_window_is_transformers_short_form_and_generate(whisper, speech, options):
    reference, model = whisper
    clip = speech[0][:8_000]  # 0.5 s: less than the window (0.6 s), read whole, silence after it
    x = log_mel(clip, 8, frames=60)  # (1, 8, 60), as generate's input encoding makes it
    torch.manual_seed(0)
    expected = theirs(reference, x, [60], options)
    torch.manual_seed(0)
    [transcript] = encdec.transcription.transcribe(model, [clip], max_new_tokens=10, **listed(options))
    assert_same([[(list(s.tokens), s.start, s.end) for s in transcript.segments]], expected)
    if "temperature" not in options:
        tokens = encdec.generate(model, x, max_new_tokens=10, return_timestamps=True, **options)[0].tolist()
        assert [t for s in transcript.segments for t in s.tokens] == [t for t in tokens if t != whisper_kit.EOS]


def test_a_batch_equals_transformers_batch_and_each_recording_alone(whisper, speech):
    reference, model = whisper
    x, frames = features(speech)
    got = ours(model, x, frames, dict(language="en"))
    assert_same(got, theirs(reference, x, frames, dict(language="en")))
    carried = dict(language="en", condition_on_prev_tokens=True, num_beams=2)  # prompts of different lengths
    together = ours(model, x, frames, carried)
    for row, wave in enumerate(speech):
        alone_x, alone_frames = features([wave])
        assert ours(model, alone_x, alone_frames, dict(language="en")) == [got[row]]
        assert ours(model, alone_x, alone_frames, carried) == [together[row]]


def test_the_api_reads_recordings_within_their_bound_and_decodes_their_text(whisper, speech, tmp_path):
    from encdec.errors import DataError
    from encdec.transcription import transcribe

    _, model = whisper
    letters = SimpleNamespace(decode=lambda ids, skip_special_tokens: "".join(chr(97 + i % 26) for i in ids))
    transcripts = transcribe(model, speech, letters, language="en", max_new_tokens=10)
    for wave, transcript in zip(speech, transcripts):
        assert transcript.duration == len(wave) / 16_000 and transcript.language == "en"
        assert transcript.text == "".join(segment.text for segment in transcript.segments)  # letter for letter
        assert [segment.id for segment in transcript.segments] == list(range(len(transcript.segments)))
        texts = [
            letters.decode([t for t in s.tokens if t < whisper_kit.NO_TIMESTAMPS], True) for s in transcript.segments
        ]
        assert [segment.text for segment in transcript.segments] == texts
    with pytest.raises(DataError, match="recording 1 lasts 3.* s, longer than the 2.0 s allowed"):
        transcribe(model, speech, max_seconds=2.0, language="en")
    for nothing in ([], "talk.wav"):
        with pytest.raises(DataError, match="give a list of recordings"):
            transcribe(model, nothing, language="en")
    with pytest.raises(ConfigError, match="max_seconds must be above 0"):
        transcribe(model, speech, max_seconds=0)
    for bad in (torch.zeros(2, 100), torch.tensor([0.0, float("nan")]), torch.zeros(0)):
        with pytest.raises(DataError, match="recording 0 "):
            transcribe(model, [bad], language="en")


@pytest.mark.parametrize("name", ["fallback", "no-speech", "detected"])
def test_every_tensor_stays_on_the_model_device(tmp_path, speech, device, name):
    """tests/device_check.py's stand-in for CUDA: recordings read on the host, decoded on the model's device."""
    from device_check import DeviceCheck

    whisper_kit.tiny_whisper(transformers, tmp_path)
    with DeviceCheck() as check:
        model = encdec.load_hf(tmp_path).to(device)
        transcripts = encdec.transcription.transcribe(model, speech, max_new_tokens=10, **listed(CASES[name]))
    assert check.errors == [] and all(transcript.segments for transcript in transcripts)


def test_a_text_model_and_prompt_options_are_one_sentence(whisper):
    from tests.generation.helpers import tiny

    _, model = whisper
    with pytest.raises(ConfigError, match="needs a speech model"):
        Transcriber(tiny("t5"))
    with pytest.raises(ConfigError, match="decoder_prompt is not an option of long-form"):
        Transcriber(model, decoder_prompt=[1, 2])
    with pytest.raises(ConfigError, match="unknown generation option"):
        Transcriber(model, beams=2)
    with pytest.raises(ConfigError, match="language 'xx' is not one this model knows"):
        Transcriber(model, language="xx")


def test_without_timestamps_the_windows_follow_back_to_back_each_decoded_as_generate_decodes_it(whisper, speech):
    """faster-whisper's without_timestamps: every window after <|notimestamps|>, one segment from its start to
    its end, its tokens those of `generate` on that window alone (the last padded with zeros, as long form pads).
    The random model writes timestamp tokens after <|notimestamps|> too: suppressed here, so that `generate` does
    not re-run the window after them (as transformers' short form does)."""
    _, model = whisper
    frames = [-(-len(speech[1]) // 160)]  # the frames that hold the recording, as Transcriber reads them
    x = log_mel(speech[1], 8, frames=frames[0])
    window = 2 * model.config.audio.max_source_positions
    options = dict(max_new_tokens=6, language="en", return_timestamps=False, suppress_tokens=whisper_kit.TIMESTAMPS)
    [transcript] = Transcriber(model, **options)([speech[1]])
    starts = list(range(0, frames[0], window))
    assert len(starts) > 2 and [s.seek for s in transcript.segments] == starts
    ends = [min(start + window, frames[0]) // 2 * 2 for start in starts]  # on the timestamps' 20 ms grid
    times = [t for start, end in zip(starts, ends) for t in (start / 100, end / 100)]
    assert [t for s in transcript.segments for t in (s.start, s.end)] == pytest.approx(times, abs=1e-9)
    for segment, start in zip(transcript.segments, starts):
        piece = torch.nn.functional.pad(x[:, :, start : start + window], (0, max(0, start + window - frames[0])))
        tokens = encdec.generate(model, piece, **options)[0].tolist()  # after <|notimestamps|>
        assert list(segment.tokens) == [t for t in tokens if t != whisper_kit.EOS] and len(tokens) > 2


INDEPENDENT = {
    "greedy": dict(language="en"),
    "beam": dict(language="fr", num_beams=3),
    "no-speech": dict(language="en", temperature=(0.0,), logprob_threshold=-1.0, no_speech_threshold=0.03),
}


@pytest.mark.parametrize("options", INDEPENDENT.values(), ids=INDEPENDENT)
def test_windows_that_do_not_depend_on_each_other_decode_as_one_batch_each_as_alone(whisper, speech, options):
    """Without timestamps or a previous text a recording's windows join one batch (window_batch rows in all): the
    model starts once a batch where window after window started once a window, and each window's segment is the
    one it has decoded alone (window_batch=1): its tokens, times and temperature, its scores within rounding."""
    _, model = whisper
    options = dict(max_new_tokens=6, return_timestamps=False, **listed(options))
    starts = []

    def counted(*args):
        starts.append(args[0].shape[0])  # the rows of the batch
        return start(*args)

    start, model.start = model.start, counted
    try:
        alone = Transcriber(model, window_batch=1, **options)(speech)
        rows_alone, starts[:] = list(starts), []
        together = Transcriber(model, window_batch=4, **options)(speech)
    finally:
        del model.start
    windows = [-(-len(wave) // 160) // (2 * model.config.audio.max_source_positions) + 1 for wave in speech]
    assert len(rows_alone) >= max(windows) and max(rows_alone) == 2  # a window of each recording a step
    assert len(starts) < len(rows_alone) and max(starts) == 4  # two windows of each, then the longer's rest

    def read(transcripts, scores=False):  # the scores differ by the batch's rounding (1e-6)
        scored = [(s.avg_logprob, s.no_speech_prob, s.compression_ratio) for t in transcripts for s in t.segments]
        if scores:
            return [value for three in scored for value in three if value is not None]
        kept = [[(s.tokens, s.start, s.end, s.seek, s.temperature) for s in t.segments] for t in transcripts]
        return kept, [[value is None for value in three] for three in scored]

    assert read(together) == read(alone)
    assert read(together, True) == pytest.approx(read(alone, True), abs=1e-5)
    assert sum(len(t.segments) for t in together) > 4


def test_window_batch_is_bounded_in_one_sentence(whisper):
    _, model = whisper
    for bad in (0, 257, 2.5, "8"):
        with pytest.raises(ConfigError, match="window_batch"):
            Transcriber(model, window_batch=bad)


@pytest.mark.parametrize(
    "options", [{}, dict(return_timestamps=False, window_batch=8)], ids=["window-after-window", "windows-together"]
)
def test_a_first_window_encoded_to_detect_its_language_is_not_encoded_again(whisper, speech, monkeypatch, options):
    """Where the language is detected, each recording's first window is encoded once: the detection's encoder
    output is what its decoding reads (a batch of two recordings: one encoder pass for the two first windows;
    window after window, every window after has a pass of its own; decoded together, a recording's other windows
    are encoded beside its first one's output), and the segments are those of encoding it again."""
    _, model = whisper
    passes = []
    hook = model.encoder.register_forward_hook(lambda _, args, out: passes.append(args[0].shape[0]))
    try:
        [first, second] = encdec.transcription.transcribe(model, speech, max_new_tokens=10, **options)
        detected = passes
        passes = []
        monkeypatch.setattr(Transcriber, "encoded_windows", staticmethod(lambda *_: {}))  # every window encoded
        again = encdec.transcription.transcribe(model, speech, max_new_tokens=10, **options)
    finally:
        hook.remove()
    assert [first, second] == again
    assert detected[0] == 2 and sum(detected) == sum(passes) - 2  # the two first windows, not encoded again
    assert len(first.segments) > 1 and first.language is not None
