"""encdec.generate with a Whisper's rules equals transformers' Whisper generate token for token: language and task
given (one for all, one per input) or detected, timestamps, a previous text's prompt, greedy and beam 4, window
after window where a decoding stops mid-segment (transformers' seek), on a tiny random transformers Whisper driven
as a Steppable (tests/generation/whisper_kit.py). Half the cases suppress the timestamp tokens, as a trained Whisper
told <|notimestamps|> does not emit them (a random one does)."""

import pytest
import torch

import encdec
from encdec.errors import ConfigError

from . import whisper_kit

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    path = tmp_path_factory.mktemp("whisper")
    reference = whisper_kit.tiny_whisper(transformers, path)
    return reference, whisper_kit.Steppable(reference), whisper_kit.defaults_of(path)


def features(seed: int, batch: int = 3) -> torch.Tensor:
    return torch.randn(batch, 8, 60, generator=torch.Generator().manual_seed(seed))


NO_TIMESTAMPS = dict(suppress_tokens=[3, 4, *whisper_kit.TIMESTAMPS])
CASES = {
    "language": dict(language="fr", **NO_TIMESTAMPS),
    "language-random-timestamps": dict(language="fr"),
    "detected-random-timestamps": dict(),
    "language-per-input": dict(language=["fr", "de", "en"], task="translate", **NO_TIMESTAMPS),
    "detected": dict(NO_TIMESTAMPS),
    "timestamps": dict(language="en", return_timestamps=True),
    "timestamps-detected": dict(return_timestamps=True, task="transcribe"),
    "beam": dict(language="de", num_beams=4, **NO_TIMESTAMPS),
    "beam-timestamps": dict(language="en", num_beams=4, return_timestamps=True),
}


@pytest.mark.parametrize("options", CASES.values(), ids=CASES)
def test_generate_equals_transformers_whisper(whisper, options):
    reference, ours, defaults = whisper
    windows = []
    for seed in range(3):
        equal_to_transformers(reference, ours, defaults, features(seed), options, windows)
    detection = 0 if options.get("language") else 1  # detect_language's encoder pass
    most = max(windows) - detection  # the windows decoded for the batch
    assert most == 1 if "suppress_tokens" in options else most > 1  # timestamps: some decodings stop mid-segment


def equal_to_transformers(reference, ours, defaults, x, options, windows):
    expected = reference.generate(x, max_new_tokens=10, **options)
    ours.starts = 0
    got = encdec.generate(ours, x, defaults=defaults, max_new_tokens=10, **options)
    assert torch.equal(got, expected), (got, expected)
    windows.append(ours.starts)


@pytest.mark.parametrize("options", [dict(NO_TIMESTAMPS), dict(return_timestamps=True), dict(num_beams=3)])
def test_an_english_only_whisper_equals_transformers(tmp_path, options):
    reference = whisper_kit.tiny_whisper(transformers, tmp_path, seed=1, multilingual=False)
    ours, defaults = whisper_kit.Steppable(reference), whisper_kit.defaults_of(tmp_path)
    for seed in range(2):
        x = features(seed)
        expected = reference.generate(x, max_new_tokens=10, **options)
        assert torch.equal(encdec.generate(ours, x, defaults=defaults, max_new_tokens=10, **options), expected)
    with pytest.raises(ConfigError, match="English-only"):
        encdec.generate(ours, x, defaults=defaults, language="en")


ENCDEC_CASES = {
    "language": dict(language="fr"),
    "detected-timestamps": dict(return_timestamps=True),
    "beam-timestamps": dict(language="en", num_beams=4, return_timestamps=True),
    "fallback": dict(
        language="de", temperature=[0.0, 0.2, 0.4], logprob_threshold=-1.5, compression_ratio_threshold=0.7
    ),
}


@pytest.mark.parametrize("options", ENCDEC_CASES.values(), ids=ENCDEC_CASES)
def test_encdecs_own_whisper_equals_transformers(tmp_path, options):
    """The Whisper family loaded from the directory decodes with the rules its generation_config.json gives."""
    reference = whisper_kit.tiny_whisper(transformers, tmp_path)
    model = encdec.load_hf(tmp_path)
    theirs = {key: tuple(value) if isinstance(value, list) else value for key, value in options.items()}
    for seed in range(2):
        x = features(seed)
        torch.manual_seed(seed)
        expected = reference.generate(x, max_new_tokens=10, **theirs)
        torch.manual_seed(seed)
        assert torch.equal(model.generate(x, max_new_tokens=10, **options), expected)


def test_no_timestamp_past_a_window_shorter_than_the_vocabulary_s(tmp_path):
    """A model whose window (15 positions: 0.30 s) holds fewer timestamps than its vocabulary (0.60 s): encdec
    writes none past the window, where transformers' rules let a random model write them (long form would move
    past speech it never read); token for token transformers' with the later timestamps suppressed."""
    reference = whisper_kit.tiny_whisper(transformers, tmp_path, max_source_positions=15)
    model = encdec.load_hf(tmp_path)
    last = whisper_kit.NO_TIMESTAMPS + 1 + 15  # <|0.30|>
    x = torch.randn(6, 8, 30, generator=torch.Generator().manual_seed(0))
    options = dict(max_new_tokens=10, language="en", return_timestamps=True)
    got = model.generate(x, **options)
    assert int(got.max()) <= last < int(reference.generate(x, **options).max())
    later = list(range(last + 1, whisper_kit.V))
    assert torch.equal(got, reference.generate(x, suppress_tokens=[3, 4, *later], **options))


def test_a_previous_text_prompt_equals_transformers(whisper):
    reference, ours, defaults = whisper
    x = features(7)
    prompt_ids = [whisper_kit.PREV, 9, 10, 11]
    options = dict(max_new_tokens=8, language="en", **NO_TIMESTAMPS)
    expected = reference.generate(x, prompt_ids=torch.tensor(prompt_ids), **options)
    got = encdec.generate(ours, x, defaults=defaults, prompt_ids=prompt_ids, **options)
    assert torch.equal(got, expected)


def test_the_language_detected_is_transformers_detect_language(whisper):
    from encdec.generation.whisper_rules import detect_language

    reference, ours, defaults = whisper
    x = features(3, batch=6)
    detected = detect_language(ours, x, torch.ones(6, 60, dtype=torch.bool), defaults["whisper"], whisper_kit.START)
    assert torch.equal(detected, reference.detect_language(x))


def test_whisper_options_without_whisper_rules_are_one_sentence():
    from .helpers import V, tiny

    model = tiny("t5")
    for options in (dict(language="en"), dict(return_timestamps=True), dict(prompt_ids=[1, 2])):
        with pytest.raises(ConfigError, match="an option of Whisper's rules"):
            encdec.generate(model, torch.randint(3, V, (2, 5)), **options)


def test_a_prompt_given_is_continued_as_transformers_generation_loop_continues_it(whisper):
    """decoder_input_ids (or decoder_prompt) replace Whisper's prompt: no rule of Whisper's applies, as in
    transformers' GenerationMixin.generate; Whisper's options beside them are one sentence."""
    reference, ours, defaults = whisper
    x, prompt = features(0), torch.tensor([[50, 53, 56, 60]] * 3)
    expected = transformers.GenerationMixin.generate(
        reference, input_features=x, decoder_input_ids=prompt, max_new_tokens=6
    )
    assert torch.equal(
        encdec.generate(ours, x, defaults=defaults, decoder_input_ids=prompt, max_new_tokens=6), expected
    )
    assert torch.equal(
        encdec.generate(ours, x, defaults=defaults, decoder_prompt=[50, 53, 56, 60], max_new_tokens=6), expected
    )
    with pytest.raises(ConfigError, match="language makes a Whisper's prompt, which a prompt given as decoder_input"):
        encdec.generate(ours, x, defaults=defaults, decoder_prompt=[50, 52], language="en")


def test_suppressed_ids_past_the_vocabulary_are_dropped_on_reading_as_transformers_ignores_them(tmp_path):
    import json

    whisper_kit.tiny_whisper(transformers, tmp_path)
    path = tmp_path / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "begin_suppress_tokens": [5, 220, 50256]}))
    model = encdec.load_hf(tmp_path)
    assert model.generation_defaults["begin_suppress_tokens"] == [5]
    with pytest.raises(ConfigError, match="begin_suppress_tokens\\[1\\] must be below vocab_size"):
        model.generate(features(0), begin_suppress_tokens=[5, 220])  # a caller's: refused
