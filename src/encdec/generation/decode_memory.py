"""What a generation will allocate, estimated before it starts and refused in one sentence where it cannot fit.

num_beams 10^6 or max_new_tokens 10^8 should not end in an allocator's traceback or a
machine swapping to a halt minutes into a search: the largest tensors a search holds
are sized from the batch, the options and the model's config (read by name: generation
knows no model class) and compared with what the model's device has free.

    token buffers     R x L x 8 bytes, a few of them (running and finished hypotheses)
    self-attention    R x L x layers x 2 x K x D x dtype (one layer's more for beams: the spare pair a
                      reorder gathers into, encdec.modules.layer_caches)
    cross-attention   B x S x layers x 2 x K x D x dtype (the beams of one example share theirs)
    relative bias     H x L x L x dtype (T5's decoder bias, computed once for every position pair)
    encoder           B x S x C x dtype (a few) and one layer's scores x dtype: B x H x S x S where it
                      holds them whole, one chunk's where it attends by chunks of queries (a long input,
                      LongT5's local band, a sliding window: the model's `attention_scores` says)
    logits            R x V x 4 bytes, a few (scores, log-probabilities, beam candidates),
                      and one per step kept with output_scores

Shapes: B examples, R rows (B x beams or samples), S source length, L output length, C model
dim, H heads, K kv heads, D head dim, V vocabulary.
"""

import torch
from torch import nn

from encdec.errors import ConfigError
from encdec.generation.config import GenerationConfig
from encdec.sizing import free_bytes, gib

CONFIG_FIELDS = ("vocab_size", "d_model", "n_heads", "n_kv_heads", "cross_attention", "positions", "head_dim")
CONFIG_FIELDS += ("decoder_layers",)
TOKEN_BUFFERS = 4  # running, finished and the gathers of a beam step, each (R, L) int64
LOGIT_COPIES = 4  # the step's logits, log-probabilities, beam totals and candidates, each (R, V)


def generation_bytes(model, cfg: GenerationConfig, batch: int, source_len: int, prompt_len: int) -> dict[str, int]:
    """The bytes the largest tensors of this generation take, by what they are (see the module docstring)."""
    rows, length = batch * cfg.rows_per_example, prompt_len + cfg.max_new_tokens
    sizes = {"token buffers": rows * length * 8 * TOKEN_BUFFERS}
    model_cfg = getattr(model, "config", None)
    if not all(hasattr(model_cfg, name) for name in CONFIG_FIELDS):
        return sizes  # a Steppable without encdec's model config: nothing more is known
    dtype = parameter_bytes(model)
    layers, heads, d_head = model_cfg.decoder_layers, model_cfg.n_heads, model_cfg.head_dim
    kv = model_cfg.n_kv_heads or heads
    cross_kv = model_cfg.cross_attention.n_kv_heads or kv
    held = layers + 1 if cfg.num_beams > 1 else layers  # beams: and the spare pair reorders gather into
    sizes["self-attention caches"] = rows * length * held * 2 * kv * d_head * dtype
    sizes["cross-attention caches"] = batch * source_len * layers * 2 * cross_kv * d_head * dtype
    if model_cfg.positions.kind == "relative" and getattr(model_cfg, "family", None) == "encoder_decoder":
        sizes["relative bias"] = heads * length * length * dtype
    scores = getattr(model, "attention_scores", None)  # by the path each layer takes (chunks, a band)
    numbers = scores(batch, source_len) if scores is not None else batch * heads * source_len * source_len
    sizes["encoder"] = (
        batch * source_len * 4 * getattr(model_cfg, "encoder_width", model_cfg.d_model) + numbers
    ) * dtype
    steps_kept = length if cfg.output_scores else 0
    sizes["logits"] = rows * model_cfg.vocab_size * 4 * (LOGIT_COPIES + steps_kept)
    return sizes


def parameter_bytes(model) -> int:
    """Bytes of one element of the model's weights (the caches' dtype): 4 where it has none to tell."""
    if isinstance(model, nn.Module):
        for tensor in model.parameters():
            return tensor.element_size()
    return 4


def check_generation_fits(
    model, cfg: GenerationConfig, batch: int, source_len: int, prompt_len: int, device: torch.device
) -> None:
    """ConfigError, naming the sizes, where this generation's tensors cannot fit in the memory `device` has free."""
    sizes = generation_bytes(model, cfg, batch, source_len, prompt_len)
    need, free = sum(sizes.values()), free_bytes(device)
    if free is None or need <= free:
        return
    largest = max(sizes, key=sizes.get)
    raise ConfigError(
        f"generating {cfg.rows_per_example:,} rows for each of {batch:,} inputs of {source_len:,} tokens, up to "
        f"{prompt_len + cfg.max_new_tokens:,} tokens long, needs ~{gib(need)} ({gib(sizes[largest])} of it {largest})"
        f"; {device} has {gib(free)} free: lower num_beams, max_new_tokens or the batch size"
    )
