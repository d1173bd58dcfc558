"""Hugging Face BART checkpoints (and the BART weight layout Marian shares) -> encdec's encoder-decoder.

BART (Lewis et al. 2020) is the post-norm Transformer with biases, exact GELU,
learned positions looked up at p + 2, a LayerNorm after the embeddings of each
stack (`layernorm_embedding`), a tied head and a fixed `final_logits_bias`.
Marian differs only in its positions and activation (see hf_marian.py), so the
weight names and most of the config mapping live here. transformers is not needed.
"""

import re
from pathlib import Path

import torch

from encdec.errors import CheckpointError
from encdec.interop.hf_t5 import read_hf_weights
from encdec.models import EncoderDecoder, ModelConfig

# Hugging Face activation_function -> our activation name
HF_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "swish": "silu", "silu": "silu", "gelu_new": "gelu_tanh"}


def hf_name(our_name: str) -> str:
    """Our parameter name -> the BART / Marian checkpoint name."""
    if re.fullmatch(r"((encoder|decoder)\.)?embed\.weight", our_name):
        return "model.shared.weight"
    if our_name in ("lm_head.weight", "final_logits_bias"):
        return our_name
    name = our_name.replace(".blocks.", ".layers.").replace(".positions.", ".embed_positions.")
    name = name.replace(".embed_norm.", ".layernorm_embedding.")
    name = re.sub(r"_attn\.(q|k|v)\.", r"_attn.\1_proj.", name)
    name = re.sub(r"_attn\.o\.", "_attn.out_proj.", name)
    name = name.replace("cross_attn", "encoder_attn").replace("_attn_norm.", "_attn_layer_norm.")
    name = name.replace(".ffn.wi.", ".fc1.").replace(".ffn.wo.", ".fc2.").replace(".ffn_norm.", ".final_layer_norm.")
    return "model." + name


def bart_layout_config(hf: dict, untied_head: bool, **family) -> ModelConfig:
    """The ModelConfig of a BART-layout checkpoint; `family` adds the position scheme."""
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf.get(dec, hf[enc]) != hf[enc]:
            raise CheckpointError(f"{enc} ({hf[enc]}) differs from {dec} ({hf[dec]}), which encdec does not support")
    activation = hf.get("activation_function", "gelu")
    if activation not in HF_ACTIVATIONS:
        raise CheckpointError(f"activation_function {activation!r} is not supported; supported: {', '.join(HF_ACTIVATIONS)}")
    eos = hf.get("eos_token_id", 2)
    return ModelConfig(
        vocab_size=hf["vocab_size"],
        d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"],
        d_ff=hf["encoder_ffn_dim"],
        n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf.get("decoder_layers") or hf["encoder_layers"],
        activation=HF_ACTIVATIONS[activation],
        norm="layernorm",
        norm_eps=1e-5,
        norm_position="post",
        bias=True,
        scale_attention=True,
        max_positions=hf.get("max_position_embeddings", 1024),
        scale_embeddings=bool(hf.get("scale_embedding", False)),
        tie_embeddings=not untied_head,
        scale_output=False,
        final_logits_bias=True,
        dropout=hf.get("dropout", 0.1),
        init="normal",
        pad_id=hf.get("pad_token_id", 1),
        eos_id=eos if isinstance(eos, int) else eos[0],
        decoder_start_id=hf.get("decoder_start_token_id", 2),
        **family,
    )


def bart_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    for flag in ("normalize_before", "add_final_layer_norm"):
        if hf.get(flag):
            raise CheckpointError(f"{flag} is set: this is an mBART-style checkpoint, which encdec does not load yet")
    return bart_layout_config(hf, untied_head, position="learned", position_offset=2, embedding_norm=True)


def load_bart_layout(path: Path, cfg_from_hf, hf_config: dict) -> EncoderDecoder:
    """Read the weights, build the model `cfg_from_hf(hf_config, untied)` describes, and fill it by name."""
    weights = read_hf_weights(path)
    if "model.shared.weight" not in weights and "model.encoder.embed_tokens.weight" in weights:
        weights["model.shared.weight"] = weights["model.encoder.embed_tokens.weight"]
    head = weights.get("lm_head.weight")
    untied = head is not None and not torch.equal(head, weights.get("model.shared.weight", head))
    model = EncoderDecoder(cfg_from_hf(hf_config, untied))
    state = {}
    for name, param in model.state_dict().items():
        key = hf_name(name)
        if key not in weights:
            raise CheckpointError(f"{path} lacks the weight {key}")
        tensor = weights[key].reshape(param.shape) if key == "final_logits_bias" else weights[key]
        if tensor.shape != param.shape:
            raise CheckpointError(f"{path}: {key} has shape {tuple(tensor.shape)}, expected {tuple(param.shape)}")
        state[name] = tensor
    model.load_state_dict(state)
    return model.eval()


def load_hf_bart(path: Path, hf_config: dict) -> EncoderDecoder:
    return load_bart_layout(path, bart_config_from_hf, hf_config)
