"""The options of `encdec.generate`, checked once, named as Hugging Face names them.

Option names and defaults follow Hugging Face's `GenerationConfig` so a call to
`model.generate(...)` translates word for word; token ids left as None come from
the model (`model.config` and, for loaded checkpoints, `model.generation_defaults`).
"""

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Annotated, Literal

import torch

from encdec.errors import ConfigError
from encdec.generation.whisper_rules import TASKS, WhisperRules
from encdec.schema import InVocabulary, Range, Satisfies, TokenId, check, check_vocabulary, fields_of, read

# The largest values generation takes, far beyond any real use and small enough that the memory estimate
# (generation/decode_memory.py) is computed before anything sized by them is allocated.
MAX_NEW_TOKENS = 1 << 20  # tokens generated per row
MAX_BEAMS = 1024  # beams, returned sequences, beam groups per example
MAX_SOURCE_TOKENS = 1 << 20  # an input's tokens (--max-source-len)
MAX_SCALE = 1e6  # temperatures and penalties: far past it every distribution is flat or one token
MAX_ASSISTANT_TOKENS = 64  # draft tokens a speculative round proposes: past ~10 nearly all are rejected
MAX_LENGTH_PENALTY = 100.0  # either way: length ** 100 already overflows a float32 score
SourceLength = Annotated[int, Range(1, MAX_SOURCE_TOKENS)]  # what inputs may be cut to (max_source_len)
AssistantTokens = Annotated[int, Range(1, MAX_ASSISTANT_TOKENS)]  # generate's, a served draft's, --num-assistant-tokens


def valid_decay(pair) -> bool:
    """(start_index, decay_factor) as Hugging Face's exponential_decay_length_penalty takes it."""
    if pair is None:
        return True
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        return False
    start, factor = pair
    return isinstance(start, int) and start >= 0 and isinstance(factor, (int, float)) and factor > 0


def token_list(ids) -> bool:
    return ids is None or (isinstance(ids, (list, tuple)) and all(isinstance(i, int) and i >= 0 for i in ids))


def valid_stop_strings(stop) -> bool:
    if stop is None or isinstance(stop, str):
        return stop != ""
    return isinstance(stop, (list, tuple)) and all(isinstance(s, str) and s for s in stop)


def valid_early_stopping(value) -> bool:
    return value is True or value is False or value == "never"


def valid_language_code(code) -> bool:
    """A language code's form (NLLB's eng_Latn, mBART-50's en_XX, M2M100's __en__); the tokenizer says which exist."""
    if not isinstance(code, str) or not 0 < len(code) <= 32 or not code.isascii():
        return False
    return code.replace("_", "").replace("-", "").isalnum()


MAX_PROMPT_TOKENS = 1 << 16  # tokens of a decoder prompt (Whisper's window holds 448)
MAX_TEMPERATURES = 16  # a fallback's temperatures: Whisper's are six


def valid_decoder_prompt(prompt) -> bool:
    """One prompt for every row (a list of ids) or one per row (a list of such lists), none empty."""
    if prompt is None:
        return True
    if not isinstance(prompt, list) or not prompt:
        return False
    rows = prompt if all(isinstance(row, list) for row in prompt) else [prompt]
    return all(0 < len(row) <= MAX_PROMPT_TOKENS and token_list(row) for row in rows) and len(rows) <= MAX_BEAMS**2


def valid_temperatures(value) -> bool:
    """A fallback's temperatures (Whisper's): 1 to MAX_TEMPERATURES, each from 0 (greedy) to MAX_SCALE."""
    return (
        isinstance(value, (list, tuple))
        and 0 < len(value) <= MAX_TEMPERATURES
        and all(isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t <= MAX_SCALE for t in value)
    )


def valid_languages(value) -> bool:
    """Whisper's language: one code, or one per input."""
    if isinstance(value, list):
        return 0 < len(value) <= MAX_BEAMS**2 and all(valid_language_code(code) for code in value)
    return valid_language_code(value)


TOKEN_LIST = "None or a list of token ids (integers >= 0)"
TokenList = Annotated[list[int] | None, Satisfies(token_list, TOKEN_LIST), InVocabulary()]
LanguageCode = Annotated[str, Satisfies(valid_language_code, "a language code: up to 32 letters, digits, _ or -")]
Temperature = (  # one sampling temperature, or a fallback's list of them
    Annotated[float, Range(0, MAX_SCALE, above=True)]
    | Annotated[
        list[Annotated[float, Range(0, MAX_SCALE)]],
        Satisfies(valid_temperatures, f"a list of 1 to {MAX_TEMPERATURES} temperatures from 0 to {MAX_SCALE:,.0f}"),
    ]
)
Beams = Annotated[int, Range(1, MAX_BEAMS)]


# where an option is exposed: encdec generate / evaluate's flags, a request's parameters, generation_config.json
CLI, HTTP, HF = "cli", "http", "hf"


def option(default, help: str, *exposed: str):
    """A GenerationConfig field exposed by its own name where `exposed` says: as --NAME on the command line
    (CLI), as a parameter of a server request (HTTP), as a key of Hugging Face's generation_config.json (HF)."""
    return field(default=default, metadata={"help": help, "exposed": frozenset(exposed)})


@dataclass
class GenerationConfig:
    """Every generation option, declared once: its type and bounds in the annotation, its default, and in
    `option(...)` its help and the surfaces that expose it (CLI_OPTIONS, HTTP_OPTIONS, HF_OPTIONS derive from it)."""

    max_new_tokens: Annotated[int, Range(1, MAX_NEW_TOKENS)] = option(
        20, "most tokens to generate per input", CLI, HTTP, HF
    )
    min_new_tokens: Annotated[int, Range(0, MAX_NEW_TOKENS)] = option(
        0, "fewest tokens before EOS is allowed", CLI, HTTP, HF
    )
    num_beams: Beams = option(1, "beam width (1: greedy or sampling)", CLI, HTTP, HF)
    do_sample: bool = option(False, "sample instead of taking the most likely token", CLI, HTTP, HF)
    temperature: Temperature = option(
        1.0, "sampling temperature, or Whisper's fallback temperatures (0.0,0.2,...: 0 is greedy)", CLI, HTTP, HF
    )
    top_k: Annotated[int, Range(0, says="zero (off) or more")] = option(  # Hugging Face's default is 50 too
        50, "sample among the k most likely tokens (0: all)", CLI, HTTP, HF
    )
    top_p: Annotated[float, Range(0, 1, above=True)] = option(1.0, "sample within this probability mass", CLI, HTTP, HF)
    repetition_penalty: Annotated[float, Range(0, MAX_SCALE, above=True)] = option(
        1.0, "penalise tokens already generated (> 1)", CLI, HTTP, HF
    )
    no_repeat_ngram_size: Annotated[int, Range(0, MAX_NEW_TOKENS, says=f"zero (off) or up to {MAX_NEW_TOKENS:,}")] = (
        option(0, "never repeat an n-gram of this size", CLI, HTTP, HF)
    )
    length_penalty: Annotated[float, Range(-MAX_LENGTH_PENALTY, MAX_LENGTH_PENALTY)] = option(
        1.0, "beam score = log-prob sum / length ** this", CLI, HTTP, HF
    )
    early_stopping: Annotated[bool | str, Satisfies(valid_early_stopping, "True, False or 'never'")] = option(
        False, "beam search: stop when num_beams hypotheses are done (True), never (as Hugging Face)", HTTP, HF
    )
    num_return_sequences: Beams = option(1, "outputs per input (beams or samples)", CLI, HTTP, HF)
    # speculative decoding (generate's assistant_model; generation/speculative.py), transformers' name and default
    num_assistant_tokens: AssistantTokens = 5
    bad_words_ids: list[list[TokenId]] | None = option(None, "token sequences never generated", HF)
    forced_bos_token_id: TokenId | None = option(None, "the token forced first", HF)
    forced_eos_token_id: TokenId | None = option(None, "the token forced at the length limit", HF)
    # a multilingual tokenizer's language codes (tokenizers.languages; generate needs tokenizer= for them)
    src_lang: LanguageCode | None = option(None, "the language code inputs are encoded in (NLLB: eng_Latn)", CLI, HTTP)
    tgt_lang: LanguageCode | None = option(
        None, "the language to write: its code forced as the first token (NLLB: fra_Latn)", CLI, HTTP
    )
    eos_token_id: TokenId | list[TokenId] | None = None
    pad_token_id: TokenId | None = None
    decoder_start_token_id: TokenId | None = None
    seed: int | None = option(None, "seed for reproducible sampling", CLI, HTTP)  # a private generator seeded once
    generator: torch.Generator | None = None
    streamer: Callable[[torch.Tensor], None] | None = None  # called with each step's tokens (B,) (greedy, sampling)
    # sampling-only filters, applied after top-k and top-p as Hugging Face applies them
    min_p: Annotated[float, Range(0, 1, says="None (off) or in [0, 1]")] | None = option(
        None, "sample among tokens at least this times as likely as the best", CLI, HTTP
    )
    typical_p: Annotated[float, Range(0, 1, above=True)] = option(  # Meister et al. 2022; 1 is off
        1.0, "locally typical sampling: keep this much typical mass", CLI, HTTP
    )
    epsilon_cutoff: Annotated[float, Range(0, 1, below=True)] = option(
        0.0, "sample among tokens at least this likely", CLI, HTTP
    )
    eta_cutoff: Annotated[float, Range(0, 1, below=True)] = option(  # drops below min(eta, sqrt(eta) * exp(-H))
        0.0, "eta sampling: entropy-dependent probability floor", CLI, HTTP
    )
    # every search
    exponential_decay_length_penalty: Annotated[
        tuple[int, float] | None, Satisfies(valid_decay, "None or a pair (start_index >= 0, decay_factor > 0)")
    ] = None  # (start_index, decay_factor) raises EOS
    suppress_tokens: TokenList = option(None, "token ids never generated", HF)
    begin_suppress_tokens: TokenList = option(None, "token ids not generated as the first new token", HF)
    renormalize_logits: bool = False  # log-softmax the processed scores
    num_beam_groups: Beams = option(  # diverse beam search (Vijayakumar et al. 2016): num_beams / groups each
        1, "diverse beam search: split the beams into this many groups", CLI, HTTP
    )
    diversity_penalty: Annotated[float, Range(0, MAX_SCALE, says=f"zero (off) or more, up to {MAX_SCALE:,.0f}")] = (
        option(0.0, "diverse beam search: penalty for a token an earlier group chose", CLI, HTTP)
    )
    stop_strings: Annotated[
        str | list[str] | None, Satisfies(valid_stop_strings, "None, a non-empty string or a list of them")
    ] = None  # needs generate(..., tokenizer=)
    # a decoder prompt every row continues (generate's decoder_input_ids as an option), and Whisper's rules
    decoder_prompt: Annotated[
        list[int] | list[list[int]] | None,
        Satisfies(valid_decoder_prompt, "None, a list of token ids, or one such list per input"),
        InVocabulary(),
    ] = option(None, "token ids every output starts from (one list, or one per input)", CLI, HTTP)
    whisper: WhisperRules | None = None  # a Whisper's generation_config.json (whisper_rules.read_whisper_rules), or
    # the mapping of its keys (WhisperRules.as_json)
    language: Annotated[str | list[str], Satisfies(valid_languages, "a language code, or one per input")] | None = (
        option(None, "Whisper: the language spoken (en, fr, ...; one per input); not given, it is detected", CLI, HTTP)
    )
    task: Annotated[str, Satisfies(lambda t: t in TASKS, " or ".join(TASKS))] | None = option(
        None, "Whisper: transcribe, or translate into English", CLI, HTTP
    )
    return_timestamps: bool = option(False, "Whisper: timestamp tokens between the text's segments", CLI, HTTP, HF)
    prompt_ids: TokenList = option(None, "Whisper: a previous text's ids, <|startofprev|> first", CLI, HTTP)
    compression_ratio_threshold: Annotated[float, Range(0, MAX_SCALE, above=True)] | None = option(
        None,
        "temperature fallback: decode again where the output's zlib compression ratio is above this",
        CLI,
        HTTP,
        HF,
    )
    logprob_threshold: Annotated[float, Range(-MAX_SCALE, 0)] | None = option(
        None, "temperature fallback: decode again where the average log-probability is below this", CLI, HTTP, HF
    )
    no_speech_threshold: Annotated[float, Range(0, 1)] | None = option(
        None,
        "temperature fallback: no speech (output dropped) where <|nospeech|> is likelier and logprob low",
        CLI,
        HTTP,
        HF,
    )
    # minimum Bayes risk (generation.mbr): samples drawn, the one most like the others kept
    mbr: Annotated[int, Range(2, MAX_BEAMS)] | None = option(
        None, "minimum Bayes risk: draw this many samples (do_sample), keep the one most like the others", CLI, HTTP
    )
    mbr_metric: Literal["chrf", "bleu"] | None = option(
        None, "MBR's utility: sacrebleu's sentence chrF (default) or BLEU", CLI, HTTP
    )
    mbr_decode: Callable[[torch.Tensor], list[str]] | None = None  # token rows (R, L) -> their texts (TextGenerator's)
    return_dict_in_generate: bool = False  # return a GenerateOutput instead of the token ids
    output_scores: bool = False  # with return_dict_in_generate: the processed scores of every step
    compile: bool = option(  # encdec only
        False,
        "fixed-shape decoding steps, compiled (CPU) or CUDA-graphed (GPU); the first batch of each shape pays "
        "the compile",
        CLI,
    )

    def __post_init__(self):
        if isinstance(self.whisper, dict):  # the rules as JSON keeps them (a checkpoint's generation defaults)
            self.whisper = read(WhisperRules, self.whisper, "whisper.")
        check(self)
        if self.num_beams == 1 and not self.do_sample and self.num_return_sequences > 1:
            raise ConfigError("num_return_sequences > 1 needs beam search (num_beams > 1) or do_sample=True")
        if self.num_beams > 1 and self.num_return_sequences > self.num_beams:
            raise ConfigError(
                f"num_return_sequences ({self.num_return_sequences}) cannot exceed num_beams ({self.num_beams})"
            )
        if self.seed is not None and self.generator is not None:
            raise ConfigError("give either seed or generator, not both")
        if self.streamer is not None and self.num_beams > 1:
            raise ConfigError("streaming tokens works with greedy decoding and sampling, not beam search")
        if self.output_scores and not self.return_dict_in_generate:
            raise ConfigError("output_scores needs return_dict_in_generate=True, which returns them")
        self._check_groups()
        self._check_mbr()

    def _check_mbr(self) -> None:
        """Minimum Bayes risk chooses among samples: each rule one sentence."""
        if self.mbr is None:
            if self.mbr_metric is not None:
                raise ConfigError("mbr_metric is the utility of MBR decoding: give mbr (the samples drawn) too")
            return
        if not self.do_sample:
            raise ConfigError('mbr chooses among samples: add do_sample (--do-sample, or "do_sample": true)')
        if self.num_beams > 1:
            raise ConfigError("mbr chooses among samples, not beams: leave num_beams at 1")
        if self.num_return_sequences > self.mbr:
            raise ConfigError(f"num_return_sequences ({self.num_return_sequences}) cannot exceed mbr ({self.mbr})")
        if self.streamer is not None:
            raise ConfigError("streaming tokens works with greedy decoding and sampling, not MBR's samples")

    def _check_groups(self) -> None:
        """Group beam search: Hugging Face's rules, each one sentence."""
        groups = self.num_beam_groups
        if groups == 1:
            if self.diversity_penalty > 0:
                raise ConfigError("diversity_penalty needs num_beam_groups > 1 (diverse beam search)")
            return
        if self.num_beams % groups:
            raise ConfigError(f"num_beams ({self.num_beams}) must be a multiple of num_beam_groups ({groups})")
        if self.diversity_penalty <= 0:
            raise ConfigError("num_beam_groups > 1 needs diversity_penalty > 0, else every group is the same")
        if self.do_sample:
            raise ConfigError("group beam search (num_beam_groups > 1) does not sample: set do_sample=False")
        if self.stop_strings:
            raise ConfigError("stop_strings works with greedy decoding, sampling and beam search, not group beams")

    def check_vocabulary(self, vocab_size: int) -> None:
        """Every token id an option holds (eos, pad, decoder start, forced, banned and suppressed ids) below the
        model's `vocab_size`, as a model config's ids are (schema.InVocabulary), else one sentence."""
        check_vocabulary(GenerationConfig, vars(self), vocab_size)
        if self.whisper is not None:
            self.whisper.check_vocabulary(vocab_size)

    @property
    def temperatures(self) -> tuple[float, ...] | None:
        """Whisper's fallback temperatures, where `temperature` lists them; None for one sampling temperature."""
        return tuple(self.temperature) if isinstance(self.temperature, (list, tuple)) else None

    @property
    def eos_ids(self) -> list[int]:
        eos = self.eos_token_id
        return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)

    @property
    def stop_string_list(self) -> list[str]:
        stop = self.stop_strings
        return [] if not stop else [stop] if isinstance(stop, str) else list(stop)

    @property
    def rows_per_example(self) -> int:
        """Rows the search holds per example: beams, or independent samples."""
        if self.mbr is not None:
            return self.mbr
        return self.num_beams if self.num_beams > 1 else self.num_return_sequences

    def check_generator(self, device: torch.device) -> None:
        """Refuse a user's generator that cannot draw on `device`, where the model computes."""
        given = self.generator
        if given is not None and not same_device(given.device, device):
            raise ConfigError(
                f"the generator is on {given.device} but the model is on {device}; "
                f"make it with torch.Generator(device={str(device)!r})"
            )

    def make_generator(self, device: torch.device | str = "cpu") -> torch.Generator | None:
        """The generator sampling draws from on `device`: a fresh one seeded with `seed`, the user's
        (checked to live there), or None for torch's default generator of that device."""
        device = torch.device(device)
        if self.seed is None:
            self.check_generator(device)
            return self.generator
        return torch.Generator(device=device).manual_seed(self.seed)

    @classmethod
    def from_options(cls, defaults: dict | None = None, **options) -> "GenerationConfig":
        """Options over model defaults; an unknown option is one sentence naming it."""
        known = [f.name for f in fields_of(cls)]
        for key in options:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known options: {', '.join(known)}"
                raise ConfigError(f"unknown generation option {key!r}{hint}")
        values = {k: v for k, v in (defaults or {}).items() if k in known}
        values.update(options)
        return cls(**values)


def exposed(surface: str) -> tuple[str, ...]:
    """The generation options `surface` (CLI, HTTP or HF) takes, by their declarations."""
    return tuple(f.name for f in fields(GenerationConfig) if surface in f.metadata.get("exposed", ()))


CLI_OPTIONS = exposed(CLI)  # encdec generate and evaluate: --NAME
HTTP_OPTIONS = exposed(HTTP)  # a server request's parameters
HF_OPTIONS = exposed(HF)  # generation_config.json's keys, read and written


def same_device(a: torch.device, b: torch.device) -> bool:
    """True when a and b name one device; a device without an index ("cuda") matches any of its type."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)
