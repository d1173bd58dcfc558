"""Generation defaults in Hugging Face's files: read from config.json and generation_config.json, written
into an exported generation_config.json. The options both sides know by the same name are those
GenerationConfig's declarations expose to HF (generation.config.HF_OPTIONS)."""

import json
import logging
import typing
from pathlib import Path

from encdec.errors import CheckpointError, ConfigError
from encdec.generation import GenerationConfig
from encdec.generation.config import HF_OPTIONS
from encdec.models import ModelConfig
from encdec.safe_paths import write_atomic
from encdec.schema import check_vocabulary, value_of
from encdec.tokenizers import Tokenizer

log = logging.getLogger(__name__)

# generation options Hugging Face's files carry under the same names as encdec.generate's: those
# GenerationConfig exposes to HF
GENERATION_KEYS = HF_OPTIONS
# what a run's own generation defaults (a checkpoint's generation.json) may hold beyond them: a transcription
# run's prompt, or the Whisper rules it decodes by and its language and task
RUN_KEYS = (*GENERATION_KEYS, "decoder_prompt", "whisper", "language", "task")


# ids a checkpoint's files may list past the model's vocabulary, which transformers ignores (WhisperConfig's
# begin_suppress_tokens, 220 and 50256, stay in the config.json of a Whisper of any vocabulary): dropped on reading
PAST_VOCABULARY_IGNORED = ("suppress_tokens", "begin_suppress_tokens")


def read_generation_defaults(hf_config: dict, generation_config: dict) -> dict:
    """The generation options a checkpoint sets; generation_config.json wins over config.json.

    Hugging Face's max_length and min_length count the decoder-start token; ours count new tokens.
    """
    defaults = {}
    for source in (hf_config, generation_config):
        values = dict(source)
        if values.get("max_length") is not None:
            values.setdefault("max_new_tokens", values["max_length"] - 1)
        if values.get("min_length"):
            values.setdefault("min_new_tokens", max(values["min_length"] - 1, 0))
        defaults.update({key: values[key] for key in GENERATION_KEYS if values.get(key) is not None})
        eos = values.get("eos_token_id")
        if isinstance(eos, list) and len(eos) > 1:  # Llama 3's: generation stops at any (the model's eos_id: the first)
            defaults["eos_token_id"] = eos
    return defaults


def checked_defaults(values: dict, where: Path, vocab_size: int | None = None) -> dict:
    """Generation defaults read from `where` (checked_options), then together as GenerationConfig takes them (its
    rules across options: num_return_sequences <= num_beams, ...); else one sentence (CheckpointError)."""
    checked_options(values, where, vocab_size)
    try:
        GenerationConfig(**values)
    except ConfigError as error:
        raise CheckpointError(f"{where}: {error}"[:240]) from None
    return values


def checked_options(values: dict, where: Path, vocab_size: int | None) -> None:
    """Each generation option read from `where` of the type and range GenerationConfig declares for it (and so
    for `encdec.generate`'s own argument), its token ids below the model's `vocab_size` (None: where generate
    resolves them against the model it runs), as a model config's are; else one sentence (CheckpointError).
    Suppressed ids past the vocabulary are dropped from `values` (PAST_VOCABULARY_IGNORED)."""
    hints = typing.get_type_hints(GenerationConfig, include_extras=True)
    for key in PAST_VOCABULARY_IGNORED:  # as transformers' processors ignore them: a tiny Whisper's keeps 50256
        if vocab_size is not None and isinstance(values.get(key), list):
            values[key] = [token for token in values[key] if not isinstance(token, int) or token < vocab_size]
    try:
        for key, value in values.items():
            if key not in RUN_KEYS and key != "eos_token_id":  # a list of them, which model.eos_id cannot hold
                raise ConfigError(f"{key!r} is not a generation option encdec reads; known: {', '.join(RUN_KEYS)}")
            value_of(hints[key], value, key)
        if vocab_size is not None:
            check_vocabulary(GenerationConfig, values, vocab_size)
    except ConfigError as error:
        raise CheckpointError(f"{where}: {error}"[:240]) from None


def write_generation_config(
    out: Path, cfg: ModelConfig, tokenizer: Tokenizer, defaults: dict, family_keys: dict | None = None
) -> None:
    """generation_config.json: the ids generation needs, the run's defaults that Hugging Face knows and the keys of
    the family's own decoding as a checkpoint had them (`family_keys`: Whisper's lang_to_id, task_to_id, ...) or a
    run carries them (its defaults' `whisper`: WhisperRules.as_json, generation_config.json's keys)."""
    dropped = sorted(set(defaults) - set(GENERATION_KEYS) - {"eos_token_id", "whisper"})
    if dropped:
        log.warning("generation defaults Hugging Face has no name for are not exported: %s", ", ".join(dropped))
    values = {
        "decoder_start_token_id": cfg.decoder_start_id,
        "eos_token_id": defaults.get("eos_token_id", cfg.eos_id),  # several, where the checkpoint had several
        "pad_token_id": cfg.pad_id,
        "bos_token_id": tokenizer.bos_id,
        **{key: defaults[key] for key in GENERATION_KEYS if defaults.get(key) is not None},
        **(defaults.get("whisper") or {}),  # a Whisper run's rules, under generation_config.json's own keys
        **(family_keys or {}),
    }
    write_atomic(out / "generation_config.json", json.dumps(values, indent=2) + "\n")
