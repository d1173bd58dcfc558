"""What a model attends to while it reads one text and writes another: `attention_maps(MODEL, source)`.

    maps = encdec.attention_maps("runs/rot5", "A dog runs on the beach.")      # the model's greedy output
    maps = encdec.attention_maps("google/flan-t5-small", "translate English to German: A dog runs.",
                                 target="Ein Hund rennt.")
    maps.cross[-1].mean(0)      # (T, S): the last decoder layer's cross-attention, heads averaged

MODEL is what encdec opens (encdec.runs.open_model): a run directory, a Hugging Face directory or a Hub
id, or an OpenedModel. A speech model's source is a recording (its path): the maps' source axis is its encoder's
positions, 20 ms apart. The source is encoded as `encdec generate` encodes an input (a run's source
template applied, cut to max_source_len or to the length the model was trained with); a given target as
`encdec evaluate` encodes a reference (a run's target template and EOS, a Hugging Face tokenizer's
text_target). Without one the target is the model's greedy output (its checkpoint's other generation
defaults kept). Either is cut to max_new_tokens. The maps are the probabilities of one teacher-forced
pass over that target (encdec.inspection.record), so row t is what the model read to write target token t.

Shapes: S source tokens, T target tokens, L layers (of one side), H heads.
"""

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from encdec.audio import HOP, SAMPLE_RATE
from encdec.data.objectives.transcribe import transcription_prompt
from encdec.errors import ConfigError, DataError
from encdec.evaluation.encoding import hf_encoding, run_encoding
from encdec.generation import generate
from encdec.generation.generate import resolve_config
from encdec.generation.interface import capabilities_of
from encdec.generation.text_generator import TextGenerator
from encdec.inspection.record import check_has_maps, record_attention
from encdec.runs.open import OpenedModel, load_tokenizer, open_model
from encdec.safe_paths import write_atomic

MAX_MAP_BYTES = 1 << 30  # the probabilities one source and target may record (fp32, both sides, all layers)
GREEDY = dict(num_beams=1, num_beam_groups=1, do_sample=False, num_return_sequences=1)


@dataclass
class AttentionMaps:
    """The attention of a model reading one source and teacher-forced over one target, fp32 on the CPU."""

    source_tokens: list[str]  # S: the tokens the encoder read (template, special tokens included)
    target_tokens: list[str]  # T: row t's token, the one the decoder writes from it (EOS included)
    cross: torch.Tensor  # (L_dec, H, T, S): each decoder layer's cross-attention
    encoder: torch.Tensor  # (L_enc, H, S, S): each encoder layer's self-attention
    generated: bool  # the target is the model's greedy output, not a given text
    model: str  # the path or Hub id the model was opened from


def attention_maps(
    model: str | Path | OpenedModel,
    source: str,
    target: str | None = None,
    *,
    checkpoint: str | None = None,
    max_source_len: int | None = None,
    max_new_tokens: int = 64,
    device: str | torch.device | None = None,
) -> AttentionMaps:
    """The cross-attention of every decoder layer and the self-attention of every encoder layer while the
    model at `model` reads `source` and writes `target` (default: its own greedy output). `checkpoint` and
    `max_source_len` are open_model's (unused for an OpenedModel); `device` is where the pass runs."""
    opened = model if isinstance(model, OpenedModel) else open_model(model, checkpoint, max_source_len)
    check_has_maps(opened.model)
    if not source.strip():
        raise DataError("the source is empty; give the text the model should read")
    if target is not None and not target.strip():
        raise DataError("the target is empty; give the text the model should write, or none to draw its own output")
    net = opened.model if device is None else opened.model.to(device)
    where = next(net.parameters()).device
    encoded = opened.text([source], return_tensors="pt", truncation=True)
    src_ids = encoded["input_ids"].to(where)
    src_mask = encoded["attention_mask"].to(where) if encoded["attention_mask"] is not None else None  # speech: none
    greedy = resolve_config(net, {**GREEDY, "max_new_tokens": max_new_tokens}, opened.generation)
    hears, generated = capabilities_of(net).reads_features, target is None
    if target is None and hears:  # its transcript, taught back as its training wrote it (the prompt first)
        target = TextGenerator(opened.text, opened.generation)(net, [source], **GREEDY, max_new_tokens=max_new_tokens)[
            0
        ]
    if target is None:
        out = generate(net, src_ids, src_mask, defaults=opened.generation, **GREEDY, max_new_tokens=max_new_tokens)
        tgt = until_eos(out[0, 1:].tolist(), greedy.eos_ids)
    else:
        tgt = target_encoder(opened)([target])[0][:max_new_tokens]
    sources = encoder_positions(net) if hears else token_strings(opened, src_ids[0].tolist())
    check_map_size(net, len(sources), len(tgt))
    tgt_ids = torch.tensor([tgt], device=where)
    record = record_attention(net, src_ids, tgt_ids, src_mask, greedy.decoder_start_token_id)
    return AttentionMaps(
        sources,
        token_strings(opened, tgt),
        record.cross[0],
        record.encoder[0],
        generated,
        str(opened.path),
    )


def until_eos(ids: list[int], eos_ids: list[int]) -> list[int]:
    """A generated row up to and including its first EOS (what follows is padding)."""
    for i, token in enumerate(ids):
        if token in eos_ids:
            return ids[: i + 1]
    return ids


def encoder_positions(model) -> list[str]:
    """A speech encoder's positions by the time each begins (its stem halves 10 ms frames: 20 ms apart)."""
    return [f"{i * 2 * HOP / SAMPLE_RATE:.2f}s" for i in range(model.config.audio.max_source_positions)]


def target_encoder(opened: OpenedModel):
    """texts -> token ids as the model was taught to write them (encdec.evaluation.encoding, as evaluate
    encodes references): a run's target template and EOS, a Hugging Face tokenizer's text_target; a speech
    model's transcript after its prompt (<|notimestamps|>, the language and task) and before EOS, as the
    transcription objective lays it out."""
    if capabilities_of(opened.model).reads_features:
        tokenizer = opened.run.tokenizer if opened.run is not None else load_tokenizer(opened.path)
        generation = opened.generation
        _, prompt = transcription_prompt(tokenizer, generation.get("language"), generation.get("task") or "transcribe")
        return lambda texts: [[*prompt, *ids, tokenizer.eos_id] for ids in tokenizer.encode(texts)]
    if opened.run is None:
        return hf_encoding(opened.text, opened.model.config.eos_id).encode_targets
    template = opened.run.description.text.target_template
    return run_encoding(opened.run.text, opened.run.tokenizer, template).encode_targets


def token_strings(opened: OpenedModel, ids: list[int]) -> list[str]:
    """Each id as its own piece of text: a run tokenizer's decoding of it alone (specials by name), a
    Hugging Face tokenizer's token (SentencePiece's "▁" before a word)."""
    if opened.run is not None:
        return opened.run.tokenizer.decode([[i] for i in ids], skip_special=False)
    return opened.text.convert_ids_to_tokens(ids)


def check_map_size(model, source_len: int, target_len: int) -> None:
    """ConfigError where the maps of `source_len` and `target_len` tokens would exceed MAX_MAP_BYTES."""
    layers = model.attention_layers()
    encoder = len(layers.encoder) * layers.encoder[0].n_heads * source_len * source_len
    cross = len(layers.cross) * layers.cross[0].n_heads * target_len * source_len
    size = 4 * (encoder + cross)
    if size > MAX_MAP_BYTES:
        raise ConfigError(
            f"the attention maps of {source_len:,} source and {target_len:,} target tokens would take "
            f"{size / 2**30:.1f} GiB (at most {MAX_MAP_BYTES / 2**30:.0f}); cut the source with max_source_len "
            "(--max-source-len) or the target with max_new_tokens (--max-new-tokens)"
        )


def save_maps(maps: AttentionMaps, path: str | Path) -> Path:
    """Write the maps as a NumPy .npz archive at `path` (through a new file renamed over it): cross
    (L_dec, H, T, S), encoder (L_enc, H, S, S), source_tokens (S,), target_tokens (T,), generated, model."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        cross=maps.cross.numpy(),
        encoder=maps.encoder.numpy(),
        source_tokens=np.array(maps.source_tokens, dtype=str),
        target_tokens=np.array(maps.target_tokens, dtype=str),
        generated=np.array(maps.generated),
        model=np.array(maps.model),
    )
    return write_atomic(path, buffer.getvalue())
