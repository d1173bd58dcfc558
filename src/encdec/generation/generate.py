"""`generate(model, src_ids, src_mask, **options)`: encode once, then search, as Hugging Face lays it out.

The result is a (B * num_return_sequences, L) tensor of token ids whose rows start
with the decoder-start token, followed by the generated tokens, padded (after EOS)
as Hugging Face's `generate()` pads them, so the two compare directly. Inputs may
live anywhere (a tokenizer's host tensors, say): they are checked where they are,
then moved to the model's device, where the search runs and the result stays.

Shapes: B examples, S source length, L output length (start token included).
"""

import logging
from dataclasses import dataclass, fields, replace

import torch
from torch import nn

from encdec.errors import ConfigError, DataError
from encdec.generation import fallback
from encdec.generation.compiled import fixed_shape_stepper
from encdec.generation.config import GenerationConfig
from encdec.generation.decode_memory import check_generation_fits
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.interface import Steppable, capabilities_of, model_device
from encdec.generation.mbr import check_mbr
from encdec.generation.speculative import Draft, check_draft
from encdec.generation.stop_strings import stop_strings_for
from encdec.generation.strategies import strategy_for
from encdec.generation.whisper_rules import MAX_TIMESTAMP_INDEX, whisper_prompt, whisper_rules_of
from encdec.generation.whisper_windows import transcribe
from encdec.modules import as_bool_mask
from encdec.tokenizers.languages import generation_languages

log = logging.getLogger(__name__)


def generate(
    model: Steppable,
    src_ids: torch.Tensor,
    src_mask: torch.Tensor | None = None,
    *,
    decoder_input_ids: torch.Tensor | None = None,
    tokenizer=None,
    defaults: dict | None = None,
    assistant_model: Steppable | None = None,
    assistant_shares_encoder: bool = False,
    **options,
) -> torch.Tensor | GenerateOutput:
    """Generate from src_ids (B, S); src_mask (B, S), True or 1 at real tokens.

    Without a mask, positions holding the pad token are padding. Options are those of
    `GenerationConfig` (Hugging Face's names); an unknown one raises ConfigError. The
    result is on the model's device (see `model_device`): the token ids, or with
    return_dict_in_generate=True a `GenerateOutput`. decoder_input_ids (B, P) is a prefix
    every row continues, as in Hugging Face (the start token is put first where no row
    begins with it); `tokenizer`, a Hugging Face tokenizer, is what stop_strings, src_lang and tgt_lang
    need (tgt_lang's code is forced first, as forced_bos_token_id, or mBART's the decoder's start; every row must
    hold src_lang's). The options
    start from `defaults` where given, else from the model's `generation_defaults` (a loaded
    checkpoint's). With Whisper's rules (the option `whisper`, read from its generation_config.json by
    whisper_rules.read_whisper_rules) src_ids are the model's features (B, C, T), the prompt is made from
    language, task, return_timestamps and prompt_ids, and the result is what transformers' Whisper
    `generate` returns: the new tokens without prompt or EOS (whisper_windows). With `assistant_model`, a draft of
    the same vocabulary, decoding is speculative (speculative.py: greedy output equal to plain greedy, samples
    distributed as plain sampling's), the draft reading the model's encoder output where
    `assistant_shares_encoder` (a draft trained against the model's frozen encoder), else running its own.
    """
    was_training = isinstance(model, nn.Module) and model.training
    if was_training:
        model.eval()  # no dropout while generating (nor while Whisper's language is detected)
    try:
        job = prepare(model, src_ids, src_mask, decoder_input_ids, tokenizer, defaults, **options)
        cfg = job.cfg
        if assistant_model is not None:
            job.draft = check_draft(model, assistant_model, assistant_shares_encoder, cfg)
        elif "num_assistant_tokens" in options:
            raise ConfigError("num_assistant_tokens is the draft's tokens a step: it needs a draft (assistant_model)")
        stepper = fixed_shape_stepper(model) if cfg.compile else model  # the model, or its fixed-shape steps
        with torch.inference_mode():
            if cfg.whisper is not None:  # what transformers' Whisper returns: the new tokens, window after window
                out = transcribe(stepper, job, strategy_for)
            elif job.draft is not None:  # the target's and the draft's states started by the speculative row
                out = strategy_for(cfg, drafted=True).run(stepper, None, job)
            else:
                state = stepper.start(job.src_ids, job.src_mask, cfg.max_new_tokens + job.prompt.shape[1] - 1, job.rows)
                out = strategy_for(cfg).run(stepper, state, job)
    finally:
        if was_training:
            model.train()
    log.info("generated %d rows of %d tokens (decoder prompt included)", *out.sequences.shape)
    return out if cfg.return_dict_in_generate else out.sequences


@dataclass
class Prepared:
    """A generate call checked and laid out, before any model work: its options, its inputs on the model's
    device, the decoder prompt (B, P) every row starts from, the stop-string test, the rows per example."""

    cfg: GenerationConfig
    src_ids: torch.Tensor
    src_mask: torch.Tensor
    prompt: torch.Tensor
    stop: object | None
    rows: int
    device: torch.device
    vocab_size: int | None = None  # the model's, where its config says (the fallback's compression ratio)
    draft: Draft | None = None  # speculative decoding's draft (generate's assistant_model)


def prepare(
    model, src_ids, src_mask=None, decoder_input_ids=None, tokenizer=None, defaults=None, resolved=None, **options
) -> Prepared:
    """What `generate` does before its search: options resolved and checked (or `resolved`, a GenerationConfig of
    this call's own that resolve_config made from them), inputs checked and moved to the model's device, the
    decoder prompt made, the memory estimated; each refusal one sentence."""
    cfg = resolved if resolved is not None else resolve_config(model, options, defaults)
    src_ids, src_mask = check_inputs(model, src_ids, src_mask, cfg)
    if cfg.src_lang is not None or cfg.tgt_lang is not None:  # codes of the tokenizer: tokenizers.languages
        given = options.get("forced_bos_token_id")
        forced, start = generation_languages(tokenizer, cfg.src_lang, cfg.tgt_lang, given, src_ids, src_mask)
        cfg.forced_bos_token_id = cfg.forced_bos_token_id if forced is None else forced
        cfg.decoder_start_token_id = cfg.decoder_start_token_id if start is None else start
    device = model_device(model, default=src_ids.device)
    cfg.check_generator(device)
    src_ids, src_mask = src_ids.to(device), src_mask.to(device)
    batch = src_ids.shape[0]
    if cfg.whisper is not None and (decoder_input_ids is not None or cfg.decoder_prompt is not None):
        check_whisper_options(cfg, "a prompt given as decoder_input_ids or decoder_prompt")
        cfg.whisper = None  # the caller's prompt, continued as transformers' GenerationMixin.generate continues it
    if cfg.whisper is not None:  # <|startoftranscript|> <|lang|> <|task|> [<|notimestamps|>], the language detected
        fits = lambda length: check_generation_fits(model, cfg, batch, src_ids.shape[-1], length, device)  # noqa: E731
        prompt = whisper_prompt(model, src_ids, src_mask, cfg, fits)
    else:
        check_whisper_options(cfg)
        if decoder_input_ids is None and cfg.decoder_prompt is not None:
            decoder_input_ids = prompt_rows(cfg.decoder_prompt, batch, device)
        prompt = decoder_prompt(model, decoder_input_ids, batch, cfg, device)  # (B, P)
        check_generation_fits(model, cfg, batch, src_ids.shape[-1], prompt.shape[1], device)  # before the search
    stop = stop_strings_for(cfg.stop_string_list, tokenizer, device) if cfg.stop_strings else None
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if fallback.applies(cfg):
        fallback.check_fallback(cfg, vocab)
    check_mbr(cfg)  # its texts' decoding given
    return Prepared(cfg, src_ids, src_mask, prompt, stop, cfg.rows_per_example, device, vocab)


def check_whisper_options(cfg: GenerationConfig, instead: str | None = None) -> None:
    """Whisper's options where Whisper's rules do not make the prompt (a model without them, or `instead`, a
    prompt the caller gives): one sentence, not ignored."""
    given = [name for name in ("language", "task", "prompt_ids", "no_speech_threshold") if getattr(cfg, name)]
    given += ["return_timestamps"] if cfg.return_timestamps else []
    if given and instead is not None:
        raise ConfigError(f"{given[0]} makes a Whisper's prompt, which {instead} replaces: give one or the other")
    if given:
        raise ConfigError(
            f"{given[0]} is an option of Whisper's rules, which this model has none of (its generation_config.json "
            "gives them: generation.whisper_rules.read_whisper_rules)"
        )


def prompt_rows(prompt: list[int] | list[list[int]], batch: int, device=None) -> torch.Tensor:
    """The option decoder_prompt as decoder_input_ids (B, P): one list for every row, or one list per row (all
    of one length, as a batch's decoder_input_ids are)."""
    rows = prompt if isinstance(prompt[0], list) else [prompt] * batch
    if len(rows) != batch:
        raise DataError(f"decoder_prompt has {len(rows)} rows but there are {batch} inputs")
    if len({len(row) for row in rows}) > 1:
        raise DataError("decoder_prompt's rows must have one length, as a batch's decoder_input_ids do")
    return torch.tensor(rows, dtype=torch.long, device=device)  # made where the search runs


def whisper_decodes(model, tokenizer=None, defaults: dict | None = None, decoder_input_ids=None, **options) -> bool:
    """Whether `generate(model, ..., **options)` decodes by Whisper's rules, so that its rows are the new tokens
    alone, without the prompt, as transformers' Whisper returns them."""
    cfg = resolve_config(model, options, defaults)
    return cfg.whisper is not None and decoder_input_ids is None and cfg.decoder_prompt is None


def resolve_config(model, options: dict, defaults: dict | None = None) -> GenerationConfig:
    """Options over `defaults` (else the checkpoint's generation defaults), with token ids from the model config."""
    if defaults is None:
        defaults = getattr(model, "generation_defaults", None)  # a Steppable need not carry any
    cfg = GenerationConfig.from_options(defaults, **options)
    check_sampling_asked(cfg, options)
    if cfg.whisper is None:  # a loaded Whisper's rules: its generation_config.json's keys (interop's hf_generation)
        cfg.whisper = whisper_rules_of(getattr(model, "hf_generation", None) or {})
    model_cfg = getattr(model, "config", None)
    audio = getattr(model_cfg, "audio", None)
    if cfg.whisper is not None and audio is not None:  # no timestamp past the window (a 10 s model's vocabulary has 30)
        cfg.whisper = replace(cfg.whisper, window_timestamps=min(audio.max_source_positions, MAX_TIMESTAMP_INDEX))
    if cfg.decoder_start_token_id is None:
        cfg.decoder_start_token_id = getattr(model_cfg, "decoder_start_id", None)
    if cfg.eos_token_id is None:
        cfg.eos_token_id = getattr(model_cfg, "eos_id", None)
    if cfg.pad_token_id is None:
        cfg.pad_token_id = getattr(model_cfg, "pad_id", None)
    if cfg.pad_token_id is None and cfg.eos_ids:
        cfg.pad_token_id = cfg.eos_ids[0]  # as Hugging Face does
    if cfg.decoder_start_token_id is None:
        raise ConfigError("no decoder_start_token_id: the model config has none, so pass it as an option")
    vocab = getattr(model_cfg, "vocab_size", None)
    if vocab is not None:  # the options' ids, the checkpoint's and the caller's alike, within the model's vocabulary
        cfg.check_vocabulary(vocab)
    return cfg


SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff")
SAMPLING_OFF = {f.name: f.default for f in fields(GenerationConfig) if f.name in SAMPLING_ONLY}  # what is off


def check_sampling_asked(cfg: GenerationConfig, options: dict) -> None:
    """A sampling option the caller set (a checkpoint's defaults aside, whose temperature Hugging Face keeps
    beside do_sample false) where the generation does not sample is one sentence, not ignored in silence."""
    if cfg.do_sample:
        return
    given = [name for name in SAMPLING_ONLY if options.get(name) not in (None, SAMPLING_OFF[name])]
    if cfg.temperatures is not None:  # Whisper's fallback: its first temperature may be 0 (greedy)
        given = [name for name in given if name != "temperature"]
    if given:
        raise ConfigError(
            f"{given[0]} acts only when sampling, and this generation does not sample: add do_sample "
            f'(--do-sample, or "do_sample": true), or leave {given[0]} out'
        )


def check_inputs(
    model, src_ids: torch.Tensor, src_mask: torch.Tensor | None, cfg: GenerationConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate the batch where src_ids lives; return it with a boolean mask there. Each problem is one
    sentence. Inputs on a GPU cost one host sync per call (host inputs none). A model that reads features
    (a speech encoder's log-mels, its capabilities say) takes them as src_ids (see `check_features`)."""
    if capabilities_of(model).reads_features:
        return check_features(src_ids, src_mask)
    if not isinstance(src_ids, torch.Tensor) or src_ids.dim() != 2 or src_ids.dtype not in (torch.long, torch.int):
        raise DataError("src_ids must be a (batch, length) tensor of integer token ids")
    if src_ids.shape[0] == 0 or src_ids.shape[1] == 0:
        raise DataError("the input is empty: there is nothing to generate from")
    if src_mask is None:
        src_mask = src_ids != cfg.pad_token_id if cfg.pad_token_id is not None else torch.ones_like(src_ids)
    if src_mask.shape != src_ids.shape:
        raise DataError(f"src_mask has shape {tuple(src_mask.shape)} but src_ids has {tuple(src_ids.shape)}")
    if src_mask.device != src_ids.device:
        src_mask = src_mask.to(src_ids.device)
    src_mask = as_bool_mask(src_mask)  # 0/1 integers or floats as Hugging Face passes them
    # each row's real tokens, then the lowest and highest id: the one host sync, in five operations (a server's
    # request threads pay each torch call twice, in a switch of Python's lock with the thread that steps)
    facts = torch.cat((src_mask.sum(dim=1), torch.stack(torch.aminmax(src_ids)).long())).tolist()
    *real, low, high = facts
    if 0 in real:
        raise DataError(f"input row {real.index(0)} is empty: it has no unmasked token")
    model_cfg = getattr(model, "config", None)  # the encoder's vocabulary, where it has its own (FSMT's)
    vocab = getattr(model_cfg, "source_vocab_size", getattr(model_cfg, "vocab_size", None))
    if vocab is not None and (low < 0 or high >= vocab):
        raise DataError(f"input token ids must lie in [0, {vocab}); got {low}..{high}")
    return (src_ids if src_ids.dtype == torch.long else src_ids.long()), src_mask


def check_features(features: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """features (B, C, T), finite floats, and their mask (B, T) (default: every frame real); each problem one
    sentence, at one host sync where they lie on a GPU."""
    if not isinstance(features, torch.Tensor) or features.dim() != 3 or not features.is_floating_point():
        raise DataError("this model reads features: a (batch, channels, frames) tensor of floats (log-mels)")
    if features.numel() == 0:
        raise DataError("the input is empty: there is nothing to generate from")
    if not bool(torch.isfinite(features).all()):
        raise DataError("the input features hold NaN or infinite values")
    B, _, T = features.shape
    if mask is None:
        return features, torch.ones(B, T, dtype=torch.bool, device=features.device)
    if tuple(mask.shape) != (B, T):
        raise DataError(f"src_mask has shape {tuple(mask.shape)} but the features have {B} rows of {T} frames")
    return features, as_bool_mask(mask.to(features.device))


def decoder_prompt(
    model, decoder_input_ids: torch.Tensor | None, batch: int, cfg: GenerationConfig, device: torch.device
) -> torch.Tensor:
    """The (B, P) tokens every row starts from, on `device`: the decoder-start token, or the given prefix,
    with the start token put first when no row begins with it (as Hugging Face does). A prefix on a GPU
    costs one host sync per call for its checks."""
    start = cfg.decoder_start_token_id
    if decoder_input_ids is None:
        return torch.full((batch, 1), start, dtype=torch.long, device=device)
    prefix = decoder_input_ids
    if not isinstance(prefix, torch.Tensor) or prefix.dim() != 2 or prefix.dtype not in (torch.long, torch.int):
        raise DataError("decoder_input_ids must be a (batch, length) tensor of integer token ids")
    if prefix.shape[0] != batch:
        raise DataError(f"decoder_input_ids has {prefix.shape[0]} rows but src_ids has {batch}")
    prefix = prefix.long()
    if prefix.shape[1] > 0:
        facts = torch.stack((prefix.min(), prefix.max(), (prefix[:, 0] != start).all().long()))
        low, high, no_start = facts.tolist()  # one host sync where the prefix is on a GPU
        vocab = getattr(getattr(model, "config", None), "vocab_size", None)
        if low < 0 or (vocab is not None and high >= vocab):
            raise DataError(f"decoder_input_ids must lie in [0, {vocab}); got {low}..{high}")
        if not no_start:
            return prefix.to(device)
    first = torch.full((batch, 1), start, dtype=torch.long, device=device)
    return torch.cat((first, prefix.to(device)), dim=1)
