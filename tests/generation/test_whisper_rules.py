"""Whisper's decoding rules equal transformers': the timestamp, suppress and begin-suppress processors on random
logits and random histories (greedy and beam rows alike: a processor sees one row at a time), the prompt
transformers' Whisper makes from language, task and timestamps, language detection, and the description read
from a generation_config.json."""

import json
import math
from dataclasses import replace

import pytest
import torch

from encdec.errors import CheckpointError, ConfigError
from encdec.generation.config import GenerationConfig
from encdec.generation.logits_processors import suppress, timestamp_rules
from encdec.generation.whisper_rules import WhisperRules, init_tokens, read_whisper_rules, whisper_rules_of

transformers = pytest.importorskip("transformers")
from transformers.generation.logits_process import (  # noqa: E402
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
    WhisperTimeStampLogitsProcessor,
)

V, EOS, NO_TIMESTAMPS = 90, 50, 60  # text below 50, special tokens 50-60, timestamps from 61
FIRST = NO_TIMESTAMPS + 1


def random_history(generator: torch.Generator, rows: int, begin: int, generated: int) -> torch.Tensor:
    """Rows of `begin` prompt tokens then `generated` tokens drawn so that timestamps, pairs of them, text and
    EOS all occur: each token a timestamp (rising, now and then repeated or falling) or a text token."""
    prompt = torch.randint(EOS, NO_TIMESTAMPS, (rows, begin), generator=generator)
    tokens = torch.randint(0, EOS, (rows, generated), generator=generator)
    is_time = torch.rand(rows, generated, generator=generator) < 0.45
    times = FIRST + torch.randint(0, 6, (rows, generated), generator=generator).cumsum(1).clamp(max=V - 1 - FIRST)
    return torch.cat((prompt, torch.where(is_time, times, tokens)), dim=1)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("max_initial", [None, 3])
def test_timestamp_rules_equal_transformers_on_random_logits_and_histories(seed, max_initial):
    generator = torch.Generator().manual_seed(seed)
    begin = 1 + seed % 4
    config = transformers.GenerationConfig(
        eos_token_id=EOS, no_timestamps_token_id=NO_TIMESTAMPS, max_initial_timestamp_index=max_initial
    )
    theirs = WhisperTimeStampLogitsProcessor(config, begin_index=begin)
    ours = timestamp_rules(NO_TIMESTAMPS, EOS, begin, max_initial)
    for generated in range(7):
        seqs = random_history(generator, 12, begin, generated)
        scores = torch.randn(12, V, generator=generator) * 3
        scores[:6, FIRST:] += 2.5  # some rows where the timestamps' mass wins
        if seed % 2:  # beam search's scores: log-probabilities
            scores = scores.log_softmax(-1)
        assert torch.equal(ours(seqs, scores), theirs(seqs, scores.clone()))


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("last", [0, 4, 12])
def test_no_timestamp_past_the_window_else_transformers_rules_on_the_window_s_timestamps(seed, last):
    """A model whose window holds fewer timestamps than its vocabulary (last_index): those past it banned before
    the rules weigh the timestamps' mass, as transformers' rules on logits whose later timestamps are -inf."""
    generator = torch.Generator().manual_seed(seed)
    begin = 1 + seed % 3
    config = transformers.GenerationConfig(eos_token_id=EOS, no_timestamps_token_id=NO_TIMESTAMPS)
    theirs = WhisperTimeStampLogitsProcessor(config, begin_index=begin)
    ours = timestamp_rules(NO_TIMESTAMPS, EOS, begin, None, last_index=last)
    for generated in range(6):
        seqs = random_history(generator, 12, begin, generated)
        scores = torch.randn(12, V, generator=generator) * 3
        scores[:6, FIRST + last + 1 :] += 6.0  # rows whose later timestamps would win
        got = ours(seqs, scores)
        assert torch.isinf(got[:, FIRST + last + 1 :]).all()
        assert torch.equal(got, theirs(seqs, scores.index_fill(1, torch.arange(FIRST + last + 1, V), -math.inf)))


@pytest.mark.parametrize("seed", range(10))
def test_suppress_and_begin_suppress_equal_transformers(seed):
    generator = torch.Generator().manual_seed(seed)
    banned = torch.randint(0, V, (7,), generator=generator).tolist() + [V + 5]  # an id past the vocabulary too
    begin = 2 + seed % 3
    for length in range(begin - 1, begin + 2):
        seqs = torch.randint(0, V, (5, length), generator=generator)
        scores = torch.randn(5, V, generator=generator)
        expected = SuppressTokensLogitsProcessor(banned)(seqs, scores)
        assert torch.equal(suppress(banned)(seqs, scores), expected)
        expected = SuppressTokensAtBeginLogitsProcessor(banned, begin)(seqs, scores)
        assert torch.equal(suppress(banned, at_length=begin)(seqs, scores), expected)


LANGS = {"<|en|>": 52, "<|fr|>": 53, "<|de|>": 54}
TASKS = {"transcribe": 56, "translate": 55}
RULES = WhisperRules(NO_TIMESTAMPS, LANGS, TASKS, is_multilingual=True, max_initial_timestamp_index=5)
START = 51


@pytest.mark.parametrize(
    "language, task, timestamps, forced, expected",
    [
        ("en", None, False, None, [[START, 52, 56, 60]] * 2),
        ("fr", "translate", True, None, [[START, 53, 55]] * 2),
        (["fr", "de"], "transcribe", False, None, [[START, 53, 56, 60], [START, 54, 56, 60]]),
        (None, None, False, [[1, None], [2, 56]], [[START, 52, 56, 60], [START, 53, 56, 60]]),  # detected
        (None, None, True, [[1, 54], [2, 55], [3, 60]], [[START, 54, 55]] * 2),
        (None, "translate", False, [[1, 54], [2, 56]], [[START, 52, 55, 60], [START, 53, 55, 60]]),
    ],
)
def test_the_prompt_is_the_one_transformers_whisper_makes(language, task, timestamps, forced, expected):
    rules = WhisperRules(NO_TIMESTAMPS, LANGS, TASKS, is_multilingual=True, forced_decoder_ids=forced)
    got = init_tokens(rules, START, 2, language, task, timestamps, detected=[52, 53])
    assert got == expected
    assert got == transformers_init_tokens(rules, language, task, timestamps, forced)


def transformers_init_tokens(rules, language, task, timestamps, forced):
    """transformers' _retrieve_init_tokens on a stand-in model whose detect_language returns [52, 53]."""
    from transformers.models.whisper.generation_whisper import WhisperGenerationMixin

    config = transformers.GenerationConfig(
        decoder_start_token_id=START,
        no_timestamps_token_id=NO_TIMESTAMPS,
        lang_to_id=dict(rules.lang_to_id),
        task_to_id=dict(rules.task_to_id),
        is_multilingual=True,
        forced_decoder_ids=forced,
        return_timestamps=timestamps,
    )
    if language is not None:
        config.language = language
    if task is not None:
        config.task = task

    class Stand(WhisperGenerationMixin):
        device = torch.device("cpu")

        def detect_language(self, **kwargs):
            return torch.tensor([52, 53])

    tokens = Stand()._retrieve_init_tokens(torch.zeros(2, 1, 1), 2, config, None, 3000, {})
    return tokens.tolist()


def test_an_english_only_model_takes_no_language_and_an_unknown_one_is_one_sentence():
    english = WhisperRules(NO_TIMESTAMPS, is_multilingual=False)
    assert init_tokens(english, START, 1, None, None, False) == [[START, NO_TIMESTAMPS]]
    with pytest.raises(ConfigError, match="English-only"):
        init_tokens(english, START, 1, "en", None, False)
    with pytest.raises(ConfigError, match="'xx' is not one this model knows"):
        init_tokens(RULES, START, 1, "xx", None, False)
    with pytest.raises(ConfigError, match="3 languages for 2 inputs"):
        init_tokens(RULES, START, 2, ["en", "fr", "de"], None, False)


def test_the_rules_read_from_a_generation_config_json(tmp_path):
    values = {
        "decoder_start_token_id": START,
        "no_timestamps_token_id": NO_TIMESTAMPS,
        "lang_to_id": LANGS,
        "task_to_id": TASKS,
        "is_multilingual": True,
        "max_initial_timestamp_index": 50,
        "prev_sot_token_id": 57,
        "suppress_tokens": [1, 2],
        "begin_suppress_tokens": [3, EOS],
        "alignment_heads": [[0, 1]],
    }
    (tmp_path / "generation_config.json").write_text(json.dumps(values))
    rules = read_whisper_rules(tmp_path)
    assert rules == WhisperRules(NO_TIMESTAMPS, LANGS, TASKS, True, 50, 57, alignment_heads=[[0, 1]])
    assert rules.timestamp_begin == FIRST and rules.no_speech_token_id == NO_TIMESTAMPS - 1
    assert whisper_rules_of({"eos_token_id": 1}) is None  # not a Whisper's
    with pytest.raises(CheckpointError, match="whisper.lang_to_id"):
        whisper_rules_of({**values, "lang_to_id": {"en": 52}})
    with pytest.raises(CheckpointError, match="whisper.max_initial_timestamp_index"):
        whisper_rules_of({**values, "max_initial_timestamp_index": -1})
    with pytest.raises(ConfigError, match="below vocab_size"):
        GenerationConfig(whisper=rules).check_vocabulary(56)
    assert GenerationConfig(whisper=json.loads(json.dumps(rules.as_json()))).whisper == rules  # kept as JSON
    windowed = replace(rules, window_timestamps=500)  # the model's (resolve_config's), not the file's: not written
    assert windowed.as_json() == rules.as_json()
    for bad in (0, -1, 1501, 10**400, 2.5, "500", True, [500]):  # out of range or not a whole number: one sentence
        with pytest.raises(CheckpointError, match="whisper.window_timestamps"):
            whisper_rules_of({**values, "window_timestamps": bad})
    with pytest.raises(ConfigError, match="whisper.task_to_id"):
        GenerationConfig(whisper={**rules.as_json(), "task_to_id": {"sing": 3}})
