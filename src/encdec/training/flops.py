"""FLOPs of a training step and the device's peak, for model FLOP utilisation (MFU).

MFU = the step's matmul FLOPs / the step's time / the device's peak FLOP/s (PaLM, Chowdhery
et al. 2022, appendix B). The FLOPs are counted for the encoder-decoder family, where the
formula is checked against torch's FLOP counter (tests/training/test_flops.py); the peak is
NVIDIA's data sheet figure for the GPUs named below, or what the user gives.
"""

import torch

from encdec.models import ModelConfig
from encdec.modules.feed_forward import GATED

# dense peak TFLOP/s by GPU name: bf16, TF32 (fp32 with TF32 on), fp32 (TF32 off). NVIDIA's data sheets;
# the H200 is the H100 SXM's chip with more memory. PCIe and NVL H100s clock lower: not listed.
PEAK_TFLOPS = {"H200": (989.0, 494.7, 67.0), "H100": (989.0, 494.7, 67.0), "A100": (312.0, 156.0, 19.5)}


def step_flops(cfg: ModelConfig, batch: int, src_len: int, tgt_len: int) -> float:
    """Matmul FLOPs of one training step of an encoder-decoder: 3x the forward's (the backward does two
    products per one).

    A (d x n) projection costs 2dn per token; attention 4 * keys * d_head per query and
    head (scores, then their weighted sum), over full score matrices as computed; the LM
    head 2 * d_model * vocab per target token; with experts, top-k feed-forwards and a router
    (2 * d_model * experts) per token in each sparse layer (ModelConfig.moe_layer), one feed-forward in the others.
    Norms, softmax and the like are not counted.
    """
    enc = cfg.encoder_config()  # the encoder's widths: the decoder's, or its own
    src, tgt = batch * src_len, batch * tgt_len  # tokens

    def widths(c: ModelConfig) -> tuple[int, int, int, int]:  # model, query / output, key / value, head
        return c.d_model, c.n_heads * c.head_dim, (c.n_kv_heads or c.n_heads) * c.head_dim, c.head_dim

    def attention(c: ModelConfig, queries: int, keys: int) -> int:
        return batch * c.n_heads * queries * keys * c.head_dim * 4

    def ffn(c: ModelConfig, layer: int, decoder: bool) -> int:  # each token through its top-k experts, after the router
        if cfg.moe_layer(layer, decoder):
            return (
                3 if c.experts.activation in GATED else 2
            ) * c.d_model * c.d_ff * c.experts.top_k + c.d_model * c.experts.count
        return (3 if c.activation in GATED else 2) * c.d_model * c.d_ff

    (de, qe, kve, _), (d, q, kv, _) = widths(enc), widths(cfg)
    encoder = 2 * src * (2 * de * qe + 2 * de * kve) + attention(enc, src_len, src_len)
    decoder = 2 * tgt * (4 * d * q + 2 * d * kv)  # self q k v o, cross q o
    decoder += 2 * src * 2 * de * kv + attention(cfg, tgt_len, tgt_len) + attention(cfg, tgt_len, src_len)  # cross k v
    ffns = sum(2 * src * ffn(enc, i, False) for i in range(cfg.n_encoder_layers))
    ffns += sum(2 * tgt * ffn(cfg, i, True) for i in range(cfg.decoder_layers))
    head = 2 * tgt * d * cfg.vocab_size
    return 3.0 * (cfg.n_encoder_layers * encoder + cfg.decoder_layers * decoder + ffns + head)


def datasheet_tflops(device: torch.device, precision: str) -> float | None:
    """The data sheet's peak for `precision` (bf16, tf32 or fp32) on a GPU listed in PEAK_TFLOPS, else None."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for gpu, peaks in PEAK_TFLOPS.items():
        if gpu in name and not ("PCIe" in name or "NVL" in name):
            return peaks[("bf16", "tf32", "fp32").index(precision)]
    return None


def training_peak_tflops(device: torch.device, precision: str, given: float | None) -> float | None:
    """The peak a training run divides by: `training.peak_tflops`, else the data sheet's (fp16 counts as
    bf16, fp32 as TF32 on a GPU where torch allows TF32 matmuls), else None (no MFU is logged)."""
    if given:
        return given
    if precision == "fp32":
        precision = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"
    return datasheet_tflops(device, "bf16" if precision == "fp16" else precision)
