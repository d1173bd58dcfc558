"""Hugging Face FSMT (model_type fsmt: FSMTForConditionalGeneration, fairseq's WMT19 translation models) <-> encdec's
post-norm encoder-decoder with fairseq's sinusoids and a source vocabulary of its own.

FSMT (Ng et al. 2019, fairseq's WMT19 news translation) is fairseq's post-norm Transformer in BART's weight names
for its layers (interop/bart/bart_layout.py): biases, ReLU, no embedding LayerNorm, no logits bias, embeddings
scaled by sqrt(d_model), fairseq's sinusoidal positions (`sinusoidal_layout: fairseq`, position p at row
pad_id + 1 + p, counted over a row's real tokens, as M2M100's). What is its own: two vocabularies, the source's
(src_vocab_size, the encoder's token table: `model.encoder.vocab_size`, `shared_embeddings: false`) and the
target's (tgt_vocab_size, the decoder's table and its `output_projection` head), each stack's table under its own
name; tie_word_embeddings (false by default) ties the three or none, and a checkpoint is read as its tables are
(a head equal to the decoder's table tied, an encoder table equal to it shared). transformers holds the sinusoids
as weights (embed_positions), which encdec computes: a checkpoint whose tables are not fairseq's is refused.
Defaults as FSMTConfig's: pad 1, EOS 2, decoder start 2 (EOS). Its tokenizer (FSMTTokenizer: Moses and BPE,
sacremoses) encodes a source with vocab-src.json and decodes an output with vocab-tgt.json, as `encdec generate`
and the server use it. Its config.json's language pair (langs) is not kept: an export writes FSMTConfig's default.
"""

from pathlib import Path

import torch

from encdec.errors import CheckpointError
from encdec.interop.bart import bart_layout
from encdec.interop.checkpoint_files import check_hf_model_fits, fill_from_hf, read_hf_weights
from encdec.interop.family import Family
from encdec.models import EncoderDecoder, ModelConfig
from encdec.modules.positions import fairseq_table

DEFAULTS = {  # FSMTConfig's, where they differ from BART's
    "pad_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "scale_embedding": True,
    "activation_function": "relu",
    "max_position_embeddings": 1024,
}
KEYS = bart_layout.BART_KEYS | {"vocab_size": "tgt_vocab_size", "encoder.vocab_size": "src_vocab_size"}
SOURCE, TARGET = "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"  # each stack's table
HEAD = "model.decoder.output_projection.weight"
NAMES = bart_layout.NAMES.where(lambda ours, theirs: ".blocks." in ours).plus(
    "FSMT",
    ("embed.weight", TARGET),
    ("decoder.embed.weight", TARGET),
    ("encoder.embed.weight", SOURCE),
    ("lm_head.weight", HEAD),
)


def fsmt_config_from_hf(hf: dict, shared: bool, tied: bool) -> ModelConfig:
    """An FSMT config.json's ModelConfig: the encoder reading the decoder's table where `shared` (then of one
    vocabulary), the head tied to it where `tied`."""
    hf = {**DEFAULTS, **hf}
    source, target = hf["src_vocab_size"], hf["tgt_vocab_size"]
    if shared and source != target:
        raise CheckpointError(
            f"tie_word_embeddings is set but src_vocab_size ({source}) differs from tgt_vocab_size ({target}): "
            "one token table cannot hold both vocabularies"
        )
    return bart_layout.layout_config(
        hf | {"vocab_size": target},
        not tied,
        position="sinusoidal",
        sinusoidal_layout="fairseq",
        final_logits_bias=False,
        shared_embeddings=shared,
        encoder={"vocab_size": source if source != target else None},
    )


def fsmt_config_alone(hf: dict) -> ModelConfig:
    """An FSMT config.json's ModelConfig without its weights (encdec size): its three tables one where
    tie_word_embeddings says so (false by default), else each its own."""
    tied = hf.get("tie_word_embeddings", False) is True
    return fsmt_config_from_hf(hf, shared=tied, tied=tied)


def positions_table(cfg: ModelConfig) -> torch.Tensor:
    """transformers' embed_positions weight: fairseq's table from row 0 to pad_id + max_positions, the pad's row
    zero (rows below it are never read)."""
    table = fairseq_table(0, cfg.pad_id + 1 + cfg.positions.max, cfg.d_model)
    table[cfg.pad_id] = 0
    return table


def check_positions(weights: dict[str, torch.Tensor], cfg: ModelConfig, path: Path) -> None:
    """One sentence where a stored position table (transformers trains them as weights) is not fairseq's
    sinusoids, which encdec computes: its logits would differ without a word."""
    expected = positions_table(cfg)[cfg.pad_id + 1 :]
    for side in ("encoder", "decoder"):
        stored = weights.get(f"model.{side}.embed_positions.weight")
        if stored is None:
            continue
        rows = stored[cfg.pad_id + 1 : cfg.pad_id + 1 + cfg.positions.max].float()
        tolerance = max(1e-6, torch.finfo(stored.dtype).eps if stored.is_floating_point() else 0)
        if rows.shape != expected.shape or not torch.allclose(rows, expected, rtol=0, atol=tolerance):
            raise CheckpointError(
                f"{path}: model.{side}.embed_positions.weight is not fairseq's sinusoidal table, which encdec "
                "computes (trained positions are not read)"
            )


def load_hf_fsmt(path: Path, hf_config: dict) -> EncoderDecoder:
    """Read the weights, build the model their tables describe (a tied checkpoint holds the decoder's alone),
    fill it by name and check the position tables."""
    check_hf_model_fits(fsmt_config_from_hf(hf_config, False, False), path)
    weights = read_hf_weights(path)
    target = weights.get(TARGET)
    for name in (SOURCE, HEAD):
        if target is not None:
            weights.setdefault(name, target)
    source, head = weights.get(SOURCE), weights.get(HEAD)
    shared = source is not None and target is not None and source.shape == target.shape and torch.equal(source, target)
    tied = head is not None and target is not None and torch.equal(head, target)
    model = fill_from_hf(EncoderDecoder(fsmt_config_from_hf(hf_config, shared, tied)), weights, NAMES.hf, path)
    check_positions(weights, model.config, path)
    return model


def check_fsmt_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings FSMT's layout does not have."""
    bart_layout.check_layout(cfg, "FSMT", bart_layout.fairseq_embedding_problems(cfg))


def fsmt_files(model: EncoderDecoder) -> tuple[dict[str, torch.Tensor], dict]:
    """A post-norm model with fairseq's positions as FSMT's weights (each table written, one copy each, the
    position tables as transformers holds them) and config.json keys: its three tables tied where they are one."""
    cfg = model.config
    weights = {name: tensor.clone() for name, tensor in NAMES.weights(model).items()}
    weights.setdefault(HEAD, weights[TARGET].clone())  # a tied head, written as the table it is
    for side in ("encoder", "decoder"):
        weights[f"model.{side}.embed_positions.weight"] = positions_table(cfg)
    config = bart_layout.layout_hf_config(cfg)
    del config["vocab_size"]
    sizes = {"src_vocab_size": cfg.source_vocab_size, "tgt_vocab_size": cfg.vocab_size}
    return weights, config | sizes | {"tie_word_embeddings": cfg.embeddings.shared and cfg.embeddings.tie}


FAMILIES = (
    Family(
        "fsmt",
        "FSMTForConditionalGeneration",
        load_hf_fsmt,
        check_fsmt_compatible,
        fsmt_files,
        lambda cfg: bart_layout.fairseq_positions(cfg) and cfg.norms.position == "post",
        KEYS,
        # FSMTTokenizer's language pair (its config's langs), its two vocabularies and its BPE merges
        ("tokenizer_config.json", "vocab-src.json", "vocab-tgt.json", "merges.txt"),
        fsmt_config_alone,
        names=lambda cfg: NAMES,  # BART's layers (q_proj, ..., fc1, fc2, encoder_attn), each stack's embed_tokens
        source_vocabulary=True,
    ),
)
