"""Whisper's decoding rules: what its generation_config.json says, and the decoder prompt it makes.

    rules = read_whisper_rules(directory)              # None for a directory that is not Whisper's
    ids = generate(model, features, whisper=rules, language="fr", task="transcribe", return_timestamps=True)

`WhisperRules` holds the ids Whisper's rules need (the no-timestamps token, from which the timestamps begin;
the language and task tokens; the previous-text token; the largest first timestamp), each declared and
bounded as a config field is. `init_tokens` makes each row's prompt as transformers' `_retrieve_init_tokens`
does (<|startoftranscript|> <|lang|> <|task|> [<|notimestamps|>]), `detect_language` picks a row's language
token from one decoder step as transformers' `detect_language` does (whisper_windows decodes the rows).

Shapes: B examples, P prompt length, L output length, V vocabulary.
"""

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated

import torch

from encdec.errors import CheckpointError, ConfigError, suggestion
from encdec.schema import Range, Satisfies, TokenId, check_vocabulary, load_json, read

MAX_LANGUAGES = 256  # Whisper knows 99 (100 from large-v3); a table of thousands is not a Whisper's
TASKS = ("transcribe", "translate")
MAX_TIMESTAMP_INDEX = 1500  # a 30 s window holds 1,500 timestamps of 20 ms
MAX_ALIGNMENT_HEADS = 1024  # large-v3 has 32 x 20 = 640 heads; published lists name 6 to 30 of them
MAX_LAYERS = 1024  # a layer or head index past it is no model's (the model's own bounds: word_times)


def valid_languages(table) -> bool:
    """{"<|en|>": id, ...}: at most MAX_LANGUAGES language tokens, each written <|code|>."""
    return (
        isinstance(table, dict)
        and len(table) <= MAX_LANGUAGES
        and all(isinstance(k, str) and 4 < len(k) <= 40 and k.startswith("<|") and k.endswith("|>") for k in table)
    )


def valid_tasks(table) -> bool:
    return isinstance(table, dict) and all(k in TASKS for k in table)


def valid_forced(pairs) -> bool:
    """transformers' old forced_decoder_ids: [[1, id or None], [2, id], ...], positions after the start token."""
    if pairs is None:
        return True
    if not isinstance(pairs, list) or len(pairs) > 8:
        return False
    return all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and 1 <= p[0] <= 8 and valid_id(p[1])
        for p in pairs
    )


def valid_heads(pairs) -> bool:
    """[[decoder layer, head], ...], at most MAX_ALIGNMENT_HEADS pairs of indices below MAX_LAYERS."""
    if pairs is None:
        return True
    if not isinstance(pairs, list) or not 0 < len(pairs) <= MAX_ALIGNMENT_HEADS:
        return False
    return all(
        isinstance(p, list) and len(p) == 2 and all(type(i) is int and 0 <= i < MAX_LAYERS for i in p) for p in pairs
    )


def valid_id(token) -> bool:
    return token is None or (isinstance(token, int) and not isinstance(token, bool) and token >= 0)


Languages = Annotated[dict[str, TokenId], Satisfies(valid_languages, f"up to {MAX_LANGUAGES} tokens <|code|>: id")]
Tasks = Annotated[dict[str, TokenId], Satisfies(valid_tasks, f"a mapping from {' or '.join(TASKS)} to a token id")]


@dataclass(frozen=True)
class WhisperRules:
    """The ids of a Whisper generation_config.json that its decoding rules need, under transformers' names."""

    no_timestamps_token_id: TokenId  # <|notimestamps|>; the timestamp tokens follow it: <|0.00|> is this + 1
    lang_to_id: Languages = field(default_factory=dict)  # {"<|en|>": 50259, ...}
    task_to_id: Tasks = field(default_factory=dict)  # {"transcribe": 50360, "translate": 50359}
    is_multilingual: bool | None = None  # False: an English-only model, which takes no language or task
    max_initial_timestamp_index: Annotated[int, Range(0, MAX_TIMESTAMP_INDEX)] | None = None
    prev_sot_token_id: TokenId | None = None  # <|startofprev|>, before a previous text's ids (prompt_ids)
    forced_decoder_ids: Annotated[
        list[list] | None, Satisfies(valid_forced, "None or pairs [position from 1, token id or null]")
    ] = None  # the old way of writing the prompt, read where neither language nor task is given
    alignment_heads: Annotated[
        list[list] | None, Satisfies(valid_heads, f"None or 1 to {MAX_ALIGNMENT_HEADS} pairs [decoder layer, head]")
    ] = None  # the cross-attention heads word timestamps read (transcription.word_times); None: the upper half
    # the last timestamp a window holds: the model's, not its generation_config.json's (resolve_config sets it from
    # the encoder's positions, one a timestamp: Whisper's 1,500 is its vocabulary's last, 30.00 s); None: every one
    window_timestamps: Annotated[int, Range(1, MAX_TIMESTAMP_INDEX)] | None = None

    def as_json(self) -> dict:
        """Its keys and values as generation_config.json writes them (GenerationConfig(whisper=...) reads them back):
        an English-only Whisper's file has no lang_to_id or task_to_id, and transformers detects a language wherever
        it finds a lang_to_id, an empty one too, so none is written empty; the window's timestamps are the model's."""
        skipped = (None, {})
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) not in skipped and f.name != "window_timestamps"
        }

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps_token_id + 1

    @property
    def no_speech_token_id(self) -> int:
        """<|nospeech|>, just before <|notimestamps|>, as transformers' WhisperNoSpeechDetection takes it."""
        return self.no_timestamps_token_id - 1

    def check_vocabulary(self, vocab_size: int) -> None:
        """Every id below the model's `vocab_size`, the tables' too; else one sentence naming the key."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["lang_to_id"], values["task_to_id"] = list(self.lang_to_id.values()), list(self.task_to_id.values())
        check_vocabulary(WhisperRules, values, vocab_size, "whisper.")
        forced = [token for _, token in self.forced_decoder_ids or () if token is not None]
        if any(token >= vocab_size for token in forced):
            raise ConfigError(f"whisper.forced_decoder_ids must hold ids below vocab_size ({vocab_size:,})")

    def language_id(self, language: str) -> int:
        """The token of `language`, a code (en) or its token (<|en|>); one sentence where the model has none."""
        code = language.lower()
        token = code if code.startswith("<|") else f"<|{code}|>"
        if token not in self.lang_to_id:
            codes = [key[2:-2] for key in self.lang_to_id]
            raise ConfigError(
                f"language {language!r} is not one this model knows{suggestion(code, codes, 'its codes')}"
            )
        return self.lang_to_id[token]


KEYS = tuple(f.name for f in fields(WhisperRules))


def whisper_rules_of(values: dict, where: str = "generation_config.json") -> WhisperRules | None:
    """The rules a generation_config.json's `values` hold, or None where it has no no_timestamps_token_id (a
    model that is not a Whisper, or an old Whisper file); a bad value is one sentence naming the key."""
    if values.get("no_timestamps_token_id") is None:
        return None
    try:
        return read(WhisperRules, {key: values[key] for key in KEYS if values.get(key) is not None}, "whisper.")
    except ConfigError as error:
        raise CheckpointError(f"{where}: {error}"[:240]) from None


def read_whisper_rules(directory: Path | str) -> WhisperRules | None:
    """The rules of a Hugging Face Whisper directory's generation_config.json (None: no such file, or not Whisper's)."""
    path = Path(directory) / "generation_config.json"
    if not path.is_file():
        return None
    return whisper_rules_of(load_json(path, "generation_config.json", CheckpointError), str(path))


def init_tokens(
    rules: WhisperRules,
    start: int,
    batch: int,
    language: str | list[str] | None,
    task: str | None,
    return_timestamps: bool,
    detected: list[int] | None = None,
) -> list[list[int]]:
    """Each row's prompt, as transformers' `_retrieve_init_tokens`: <|startoftranscript|>, the language (given,
    one for all or one per row, else `detected`, else the forced_decoder_ids'), the task (given; transcribe
    where only a language is), then <|notimestamps|> unless timestamps are asked (and dropped where asked)."""
    if rules.is_multilingual is False and (language is not None or task is not None):
        raise ConfigError("this Whisper is English-only: it takes no language or task")
    if isinstance(language, list) and len(language) != batch:
        raise ConfigError(f"language lists {len(language)} languages for {batch} inputs; give one, or one per input")
    if task is not None and task not in rules.task_to_id:
        raise ConfigError(f"task {task!r} is not one this model knows{suggestion(task, list(rules.task_to_id))}")
    tokens: list[int | None] = [start]
    if task is None and language is None:
        for position, token in rules.forced_decoder_ids or ():  # [[1, lang], [2, task], [3, notimestamps]]
            if position != len(tokens):
                break
            tokens.append(token)
    languages = language if isinstance(language, list) else [language] * batch
    if language is not None:
        lang_ids: list[int] | None = [rules.language_id(code) for code in languages]
    elif rules.lang_to_id and (len(tokens) == 1 or tokens[1] is None):
        lang_ids = detected  # None where the caller has not detected them yet: see `needs_detection`
    else:
        lang_ids = None
    rows = []
    for row in range(batch):
        row_tokens = list(tokens)
        if lang_ids is not None:
            row_tokens[1:2] = [lang_ids[row]]
        if task is not None:
            row_tokens.append(rules.task_to_id[task])  # transformers appends it (its replace_or_add is a no-op)
        elif language is not None and rules.task_to_id and not set(row_tokens) & set(rules.task_to_id.values()):
            row_tokens.append(rules.task_to_id["transcribe"])
        if not return_timestamps and row_tokens[-1] != rules.no_timestamps_token_id:
            row_tokens.append(rules.no_timestamps_token_id)
        elif return_timestamps and row_tokens[-1] == rules.no_timestamps_token_id:
            row_tokens.pop()
        rows.append([t for t in row_tokens if t is not None])
    return rows


def needs_detection(rules: WhisperRules, language, task) -> bool:
    """Whether the prompt waits on `detect_language`: a multilingual model told no language (nor, where neither
    is given, by its forced_decoder_ids)."""
    if language is not None or not rules.lang_to_id:
        return False
    forced = dict((p, t) for p, t in rules.forced_decoder_ids or ()) if task is None else {}
    return forced.get(1) is None


def with_previous_text(rows: list[list[int]], rules: WhisperRules, prompt_ids: list[int] | None) -> list[list[int]]:
    """`prompt_ids` (a previous text, <|startofprev|> first as transformers' get_prompt_ids gives it) before
    each row's prompt, as transformers' short-form `_prepare_decoder_input_ids` puts them."""
    if not prompt_ids:
        return rows
    if rules.prev_sot_token_id is not None and prompt_ids[0] != rules.prev_sot_token_id:
        raise ConfigError("prompt_ids must start with <|startofprev|> (the tokenizer's get_prompt_ids gives them so)")
    return [list(prompt_ids) + row for row in rows]


def language_logits_ids(rules: WhisperRules, device: torch.device) -> torch.Tensor:
    return torch.tensor(sorted(set(rules.lang_to_id.values())), dtype=torch.long, device=device)


def most_likely_language(logits: torch.Tensor, rules: WhisperRules) -> torch.Tensor:
    """logits (B, V) after <|startoftranscript|> -> (B,) each row's most likely language token, transformers'
    `detect_language` (every other token at -inf, then the argmax: the lowest id wins a tie)."""
    allowed = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
    allowed[language_logits_ids(rules, logits.device)] = True
    return logits.masked_fill(~allowed, -torch.inf).argmax(dim=-1)


def detect_language(model, src_ids: torch.Tensor, src_mask: torch.Tensor, rules: WhisperRules, start: int):
    """(B,) each input's most likely language token after one decoder step from <|startoftranscript|> (`start`),
    as transformers' `detect_language`: its own encoder pass, apart from the search's."""
    with torch.inference_mode():
        return language_after(model, model.start(src_ids, src_mask, 1, 1), src_ids, rules, start)


def language_after(model, state, src_ids: torch.Tensor, rules: WhisperRules, start: int) -> torch.Tensor:
    """(B,) each input's most likely language token after one decoder step from <|startoftranscript|> (`start`),
    `state` begun for one new token over the memory of inputs `src_ids` (B, ...) (`model.start`, or `model.begin`
    where the memory is kept for the decoding after)."""
    with torch.inference_mode():
        first = torch.full((src_ids.shape[0], 1), start, dtype=torch.long, device=src_ids.device)
        logits = model.step(first, state)[:, -1]  # (B, V)
    return most_likely_language(logits, rules)


def whisper_prompt(model, src_ids: torch.Tensor, src_mask: torch.Tensor, cfg, fits) -> torch.Tensor:
    """(B, P) every row's prompt on src_ids' device, from cfg's (a GenerationConfig's) whisper rules, language,
    task, return_timestamps and prompt_ids; `fits(P)` refuses a generation too large before the language is
    detected (one encoder pass and one step, where the language is not given)."""
    rules, batch, start = cfg.whisper, src_ids.shape[0], cfg.decoder_start_token_id
    detect = needs_detection(rules, cfg.language, cfg.task)
    detected = [start] * batch if detect else None  # stands for the language until it is detected
    rows = init_tokens(rules, start, batch, cfg.language, cfg.task, cfg.return_timestamps, detected)
    fits(len(rows[0]) + len(cfg.prompt_ids or ()))
    if detect:
        detected = detect_language(model, src_ids, src_mask, rules, start).tolist()
        rows = init_tokens(rules, start, batch, cfg.language, cfg.task, cfg.return_timestamps, detected)
    rows = with_previous_text(rows, rules, cfg.prompt_ids)
    return torch.tensor(rows, dtype=torch.long, device=src_ids.device)
