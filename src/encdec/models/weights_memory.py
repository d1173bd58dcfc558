"""Whether a model fits before it is built: its size estimated from any ModelConfig, checked against the device.

A config.json with d_model 10^9 or a model section with 10^6 layers should be one
sentence, not an allocator's traceback, a machine swapping to a halt or minutes of
building modules: the parameters are estimated from the config alone (from above:
every matrix counted as if gated, untied and in every expert), times the bytes each
one takes where it lives, and compared with what the device has free
(`encdec.sizing.free_bytes`) before any tensor exists. Training adds its own share
(gradients, optimizer moments, activations: training/memory.py).
"""

import torch

from encdec.errors import ConfigError, EncdecError
from encdec.models.model_config import ModelConfig
from encdec.sizing import free_bytes, gib

WEIGHT_BYTES = 4  # models are built in fp32
LAYER_BYTES = 64 << 10  # a block's modules and small tensors as Python objects (about 44 KiB measured)
EXPERT_BYTES = 16 << 10  # an expert's modules, in every layer


def estimated_parameters(cfg: ModelConfig) -> int:
    """An upper estimate of the parameter count of `cfg`'s model, without building it: arithmetic on the
    config, for a refusal before anything is built (models/parameter_count.py counts exactly, from models built
    on the meta device). An encoder of other widths (model.encoder) counts as if every layer had the wider."""
    wide = cfg.encoder  # each unset width is the decoder's
    d, d_ff = max(cfg.d_model, wide.d_model or 0), max(cfg.d_ff, wide.d_ff or 0)
    heads = max(cfg.n_heads, cfg.cross_attention.n_heads or cfg.n_heads, wide.n_heads or 0)
    attention = 4 * d * heads * max(cfg.head_dim, wide.d_head or 0, d // max(wide.n_heads or heads, 1))
    dense, sparse = 3 * d * d_ff, 3 * d * d_ff * cfg.experts.count + d * cfg.experts.count  # gated; the router
    if cfg.family == "rnn_seq2seq":  # an LSTM's four gates over input and state, and the attention's matrices
        attention, dense, sparse = 8 * d * d, 3 * d * d, 3 * d * d
    encoder_sparse = sparse_layers(cfg, cfg.n_encoder_layers, decoder=False)
    decoder_sparse = sparse_layers(cfg, cfg.decoder_layers, decoder=True)
    ffn = (encoder_sparse + decoder_sparse) * sparse
    ffn += (cfg.n_encoder_layers - encoder_sparse + cfg.decoder_layers - decoder_sparse) * dense
    layers = cfg.n_encoder_layers * attention + cfg.decoder_layers * 2 * attention + ffn
    rows = max(cfg.positions.max, wide.max_positions or 0)
    positions = (rows + cfg.positions.offset + 1) * d + cfg.positions.relative_buckets * heads
    research = getattr(cfg, "research", None)  # a learned causal aggregation's matrix: max_positions^2
    mixing = cfg.positions.max**2 if getattr(research, "embedding_aggregation", None) == "MATMUL" else 0
    return 2 * max(cfg.vocab_size, wide.vocab_size or 0) * d + 2 * positions + layers + mixing


def sparse_layers(cfg: ModelConfig, layers: int, decoder: bool) -> int:
    """How many of a stack's `layers` feed-forwards are mixtures of experts (ModelConfig.moe_layer's layers 1,
    1 + step, ...; every one at step 1), counted without a loop over them."""
    if cfg.experts.count == 1:
        return 0
    step = cfg.experts.step(decoder)
    return layers if step == 1 else (layers - 2) // step + 1 if layers > 1 else 0


def building_bytes(cfg: ModelConfig) -> int:
    """What building a model costs on the CPU besides its weights: Python objects per block and per expert,
    and a sinusoidal table's float64 copies (sines, cosines and the table) before it becomes fp32."""
    blocks = cfg.n_encoder_layers + cfg.decoder_layers
    table = 3 * 8 * cfg.positions.max * cfg.d_model if cfg.positions.kind == "sinusoidal" else 0
    return blocks * (LAYER_BYTES + cfg.experts.count * EXPERT_BYTES) + table


def check_weights_fit(
    cfg: ModelConfig,
    device: torch.device | str = "cpu",
    bytes_per_parameter: int = WEIGHT_BYTES,
    purpose: str = "its weights need",
    error: type[EncdecError] = ConfigError,
    source: str = "",
) -> int:
    """The estimated parameter count of `cfg`'s model; one sentence (`error`, starting with `source`, saying
    "`purpose` ~X GiB") where `bytes_per_parameter` bytes for each cannot fit in the memory `device` has free."""
    n, device = estimated_parameters(cfg), torch.device(device)
    need = n * bytes_per_parameter + (building_bytes(cfg) if device.type == "cpu" else 0)
    free = free_bytes(device)
    if free is not None and need > free:
        raise error(
            f"{source}the model has about {count(n)} parameters (d_model {count(cfg.d_model)}, "
            f"{count(cfg.n_encoder_layers)} + {count(cfg.decoder_layers)} layers, vocabulary {count(cfg.vocab_size)})"
            f"; {purpose} ~{gib(need)} but {device} has {gib(free)} free"
        )
    return n


def count(n: int) -> str:
    """A count for a sentence: 1,234,567, or 1.23e+12 past a billion."""
    return f"{n:,}" if n < 10**9 else f"{n:.3g}"
