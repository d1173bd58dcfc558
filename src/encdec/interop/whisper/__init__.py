"""Hugging Face Whisper and Distil-Whisper (model_type whisper, WhisperForConditionalGeneration) <-> encdec's whisper
family (models.whisper).

Whisper (Radford et al. 2022) is BART's weight layout (interop/bart/bart_layout.py) made pre-norm with a LayerNorm
closing each stack, biases everywhere but on the attention's keys (k_proj has none: attention.bias qvo), exact GELU,
unscaled token embeddings (config.json's scale_embedding is read as transformers computes it: never applied),
learned decoder positions from 0 (max_target_positions rows), a head (proj_out) tied to the decoder's token table
unless it differs, no logits bias; its encoder reads num_mel_bins log-mel bins through two convolutions (conv1,
conv2) at fixed sinusoids of max_source_positions rows (embed_positions, read as given). Every size reads: tiny to
large-v3 (128 mel bins), and Distil-Whisper, whose decoder has 2 layers. generation_config.json's Whisper keys
(lang_to_id, task_to_id, no_timestamps_token_id, alignment_heads, ...) are kept as read and written back on export
(GENERATION_KEYS). Defaults as WhisperConfig's: pad and EOS 50256, decoder start 50257.
"""

from pathlib import Path

import torch

from encdec.audio import HOP, SAMPLE_RATE
from encdec.audio.features import N_FFT
from encdec.errors import CheckpointError
from encdec.interop.bart import bart_layout
from encdec.interop.checkpoint_files import check_hf_model_fits, fill_from_hf, read_hf_weights
from encdec.interop.family import Family, NameMap, config_read_alone
from encdec.models import ModelConfig
from encdec.models.whisper import Whisper

DEFAULTS = {  # WhisperConfig's, where they differ from BART's
    "pad_token_id": 50256,
    "eos_token_id": 50256,
    "decoder_start_token_id": 50257,
    "activation_function": "gelu",
    "dropout": 0.0,
}
KEYS = bart_layout.BART_KEYS | {
    "positions.max": "max_target_positions",
    "audio.n_mels": "num_mel_bins",
    "audio.max_source_positions": "max_source_positions",
}
# generation_config.json's keys of Whisper's own decoding (its prompts, timestamps, languages, word alignment), which
# encdec's generation options do not hold (suppress_tokens and begin_suppress_tokens they do): kept as read
# (model.hf_generation) and written back on export
GENERATION_KEYS = (
    "lang_to_id",
    "task_to_id",
    "is_multilingual",
    "no_timestamps_token_id",
    "prev_sot_token_id",
    "max_initial_timestamp_index",
    "alignment_heads",
    "forced_decoder_ids",
)

# BART's names but its token table, embedding norm and logits bias: Whisper's decoder holds the table, its head is
# proj_out, its encoder begins with two convolutions and a fixed table
BART_NAMES = bart_layout.NAMES.where(
    lambda ours, theirs: (
        not theirs.startswith(("model.shared", "lm_head", "final_logits_bias")) and "layernorm_embedding" not in theirs
    )
)
NAMES = BART_NAMES.plus(
    "Whisper",
    ("embed.weight", "model.decoder.embed_tokens.weight"),
    ("decoder.embed.weight", "model.decoder.embed_tokens.weight"),
    ("lm_head.weight", "proj_out.weight"),
    ("encoder.conv1.{wb}", "model.encoder.conv1.{wb}"),
    ("encoder.conv2.{wb}", "model.encoder.conv2.{wb}"),
)


def names_for(cfg: ModelConfig) -> NameMap:
    return NAMES


def whisper_config_from_hf(hf: dict, untied_head: bool) -> ModelConfig:
    """A config.json of WhisperForConditionalGeneration's as the whisper family's ModelConfig."""
    hf = {**DEFAULTS, **hf}
    if hf.get("d_model", 0) % 2:
        raise CheckpointError(f"d_model ({hf['d_model']}) is odd; Whisper's sinusoidal encoder positions need it even")
    return bart_layout.layout_config(
        {**hf, "max_position_embeddings": hf.get("max_target_positions", 448)},
        untied_head,
        family="whisper",
        audio={"n_mels": hf.get("num_mel_bins", 80), "max_source_positions": hf.get("max_source_positions", 1500)},
        attention={"bias": "qvo"},
        embeddings={"scale": False},  # transformers' Whisper computes scale_embedding's factor and never applies it
        positions={"kind": "learned", "offset": 0},
        norms={"position": "pre"},
        output={"logits_bias": False},
    )


def load_hf_whisper(path: Path, hf_config: dict) -> Whisper:
    """The weights of a Whisper directory in our whisper model; its head untied where proj_out differs from the token
    table (transformers writes a tied one once)."""
    check_hf_model_fits(whisper_config_from_hf(hf_config, True), path)
    weights = read_hf_weights(path)
    head, table = weights.get("proj_out.weight"), weights.get("model.decoder.embed_tokens.weight")
    untied = head is not None and table is not None and not torch.equal(head, table)
    model = Whisper(whisper_config_from_hf(hf_config, untied))
    return fill_from_hf(model, weights, NAMES.hf, path)


def check_whisper_compatible(cfg: ModelConfig) -> None:
    """Raise ConfigError naming the settings Whisper's layout does not have."""
    own = {
        "family must be whisper": cfg.family != "whisper",
        "positions.offset must be 0": cfg.positions.offset != 0,
        "attention.bias must be qvo (no key bias)": cfg.attention.bias != "qvo",
        "embeddings.scale must be false (transformers' Whisper never scales)": cfg.embeddings.scale,
        "output.logits_bias must be false": cfg.output.logits_bias,
    }
    bart_layout.check_layout(cfg, "Whisper", own, norm_position="pre")


def whisper_files(model: Whisper) -> tuple[dict[str, torch.Tensor], dict]:
    """Our whisper model as WhisperForConditionalGeneration's weights and config.json keys."""
    cfg = model.config
    config = bart_layout.layout_hf_config(cfg)
    del config["max_position_embeddings"]
    config |= {
        "num_mel_bins": cfg.audio.n_mels,
        "max_source_positions": cfg.audio.max_source_positions,
        "max_target_positions": cfg.positions.max,
        "bos_token_id": cfg.eos_id,  # Whisper's <|endoftext|> begins and ends a text (WhisperConfig's 50256 otherwise)
    }
    return NAMES.weights(model), config


def preprocessor_config(cfg: ModelConfig) -> dict[str, dict]:
    """preprocessor_config.json: the WhisperFeatureExtractor that makes this model's log-mels (its bins, and its
    window: twice its source positions in 10 ms frames, 30 s for Whisper's own), as transformers writes it."""
    frames = 2 * cfg.audio.max_source_positions
    samples = frames * HOP
    seconds = samples // SAMPLE_RATE if samples % SAMPLE_RATE == 0 else samples / SAMPLE_RATE
    extractor = {
        "chunk_length": seconds,
        "dither": 0.0,
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": cfg.audio.n_mels,
        "hop_length": HOP,
        "n_fft": N_FFT,
        "n_samples": samples,
        "nb_max_frames": frames,
        "padding_side": "right",
        "padding_value": 0.0,
        "processor_class": "WhisperProcessor",
        "return_attention_mask": False,
        "sampling_rate": SAMPLE_RATE,
    }
    return {"preprocessor_config.json": extractor}


FAMILIES = (
    Family(
        "whisper",
        "WhisperForConditionalGeneration",
        load_hf_whisper,
        check_whisper_compatible,
        whisper_files,
        lambda cfg: True,  # the whisper family's one layout
        KEYS,
        ("vocab.json", "merges.txt", "normalizer.json"),
        config_read_alone(whisper_config_from_hf),
        model_family="whisper",
        names=names_for,  # q_proj, k_proj, v_proj, out_proj, fc1, fc2 (encoder_attn: the cross-attention)
        generation_keys=GENERATION_KEYS,
        extra_files=preprocessor_config,
    ),
)
