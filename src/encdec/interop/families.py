"""Every Hugging Face family encdec reads and writes, one entry each: what `load_hf`, `export_hf`, the
refusals that name config.json's keys and the files an export may replace all read.

A family is the model_type of a config.json: its loader (directory -> model), its check and writer (model
-> directory), which of our layouts it is written for, the config.json keys our ModelConfig fields are read
from where the names differ, and the tokenizer files its checkpoints ship. A new family (LongT5, T5Gemma,
...) is one entry here and its hf_*.py module of names and config mapping. Each is read into one of encdec's
model families (`model_family`): the sequence-to-sequence ones into the encoder-decoder, Gemma 2, Gemma 3's text
model, Llama, Qwen2 and Qwen3 into the decoder-only family; a model is written only as a family of its own model
family.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from torch import nn

from encdec.interop.hf_bart import (
    BART_KEYS,
    bart_config_from_hf,
    bart_files,
    check_bart_compatible,
    check_mbart_compatible,
    load_hf_bart,
    load_hf_mbart,
    mbart_config_from_hf,
)
from encdec.interop.hf_gemma import GEMMA_KEYS, check_gemma_compatible, config_from_gemma, gemma_files, load_hf_gemma
from encdec.interop.hf_llama import LLAMA_KEYS, check_llama_compatible, config_from_llama, llama_files, load_hf_llama
from encdec.interop.hf_longt5 import check_longt5_compatible, load_hf_longt5, longt5_files, longt5_model_config
from encdec.interop.hf_m2m100 import check_m2m100_compatible, load_hf_m2m100, m2m100_config, m2m100_files
from encdec.interop.hf_marian import check_marian_compatible, load_hf_marian, marian_config_from_hf, marian_files
from encdec.interop.hf_mt5 import (
    check_mt5_compatible,
    check_umt5_compatible,
    load_hf_mt5,
    load_hf_umt5,
    mt5_files,
    mt5_model_config,
    umt5_files,
    umt5_model_config,
)
from encdec.interop.hf_pegasus import check_pegasus_compatible, load_hf_pegasus, pegasus_config_from_hf, pegasus_files
from encdec.interop.hf_switch import check_switch_compatible, load_hf_switch, switch_files, switch_model_config
from encdec.interop.hf_t5 import (
    T5_KEYS,
    check_t5_compatible,
    config_from_hf,
    load_hf_t5,
    t5_files,
    write_hf_directory,
)
from encdec.interop.hf_t5gemma import (
    T5GEMMA_KEYS,
    check_t5gemma_compatible,
    load_hf_t5gemma,
    t5gemma_config,
    t5gemma_files,
)
from encdec.interop.hf_t5gemma2 import (
    T5GEMMA2_KEYS,
    check_t5gemma2_compatible,
    load_hf_t5gemma2,
    t5gemma2_config,
    t5gemma2_files,
)
from encdec.models import ModelConfig

IDS = {"pad_id": "pad_token_id", "eos_id": "eos_token_id", "decoder_start_id": "decoder_start_token_id"}


def config_read_alone(config_from_hf: Callable[..., ModelConfig]) -> Callable[[dict], ModelConfig]:
    """A family's config.json -> ModelConfig without its weights (encdec size): the head untied where
    tie_word_embeddings says false (a loader reads it from the weights themselves)."""
    return lambda hf: config_from_hf(hf, untied_head=hf.get("tie_word_embeddings", True) is False)


@dataclass(frozen=True)
class Family:
    model_type: str  # config.json's model_type
    hf_class: str  # the transformers class an export loads as
    load: Callable[[Path, dict], nn.Module]  # (directory, its config.json) -> our model, weights filled
    check: Callable[[ModelConfig], None]  # ConfigError naming what keeps a config from this layout
    files: Callable[[nn.Module], tuple[dict[str, torch.Tensor], dict]]  # our model -> its weights, config keys
    writes: Callable[[ModelConfig], bool]  # whether a model of this layout (and model_family) exports as this family
    keys: dict[str, str]  # ModelConfig field -> the config.json key it is read from, where the names differ
    tokenizer_files: tuple[str, ...]  # the tokenizer files its checkpoints ship beside tokenizer.json
    config: Callable[[dict], ModelConfig] | None = None  # config.json -> our config, no weight read (encdec size)
    model_family: str = "encoder_decoder"  # the ModelConfig.family it is read into and written from

    def save(self, model: nn.Module, path: Path) -> None:
        """Write `model` into `path` as this family's config.json and model.safetensors; a layout the family
        cannot express is refused first (ConfigError), nothing written."""
        self.check(model.config)
        weights, config = self.files(model)
        write_hf_directory(path, weights, {"architectures": [self.hf_class], "model_type": self.model_type, **config})


def llama_layout(model_type: str, hf_class: str, writes: Callable[[ModelConfig], bool], tokenizer_files) -> Family:
    """A decoder-only family of Llama's layout (hf_llama: Llama, Qwen2, Qwen3), which differ in biases and norms."""
    return Family(
        model_type,
        hf_class,
        load_hf_llama,
        partial(check_llama_compatible, model_type=model_type),
        partial(llama_files, model_type=model_type),
        writes,
        LLAMA_KEYS,
        tokenizer_files,
        config_from_llama,
        model_family="decoder_only",
    )


def gemma_layout(model_type: str, hf_class: str, writes: Callable[[ModelConfig], bool]) -> Family:
    """A decoder-only family of Gemma's layout (hf_gemma: Gemma 2, Gemma 3's text model), which differ in head
    norms, RoPE and caps."""
    return Family(
        model_type,
        hf_class,
        load_hf_gemma,
        partial(check_gemma_compatible, model_type=model_type),
        partial(gemma_files, model_type=model_type),
        writes,
        GEMMA_KEYS,
        ("tokenizer.model",),  # Gemma's SentencePiece model beside its tokenizer.json
        config_from_gemma,
        model_family="decoder_only",
    )


def vaswani_sinusoids(cfg: ModelConfig) -> bool:
    """Sinusoidal positions Marian and Pegasus write (interleaved or halves); fairseq's are M2M100's."""
    return cfg.position == "sinusoidal" and cfg.sinusoidal_layout != "fairseq"


def t5_bias(cfg: ModelConfig) -> bool:
    """T5's relative bias, in each stack's first layer (UMT5's is in every layer)."""
    return cfg.position == "relative" and not cfg.relative_bias_per_layer


FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        Family(
            "t5",
            "T5ForConditionalGeneration",
            load_hf_t5,
            check_t5_compatible,
            t5_files,
            lambda cfg: (
                t5_bias(cfg) and cfg.n_experts == 1 and cfg.hf_model_type is None and cfg.encoder_attention == "full"
            ),
            T5_KEYS | IDS,
            ("spiece.model",),
            config_read_alone(config_from_hf),
        ),
        Family(
            "mt5",
            "MT5ForConditionalGeneration",
            load_hf_mt5,
            check_mt5_compatible,
            mt5_files,
            lambda cfg: cfg.hf_model_type == "mt5",
            T5_KEYS | IDS,
            ("spiece.model",),
            mt5_model_config,
        ),
        Family(
            "umt5",
            "UMT5ForConditionalGeneration",
            load_hf_umt5,
            check_umt5_compatible,
            umt5_files,
            lambda cfg: cfg.position == "relative" and cfg.relative_bias_per_layer,
            T5_KEYS | IDS,
            ("spiece.model",),
            umt5_model_config,
        ),
        Family(
            "longt5",
            "LongT5ForConditionalGeneration",
            load_hf_longt5,
            check_longt5_compatible,
            longt5_files,
            lambda cfg: cfg.encoder_attention != "full",
            T5_KEYS | IDS | {"encoder_attention": "encoder_attention_type"},
            ("spiece.model",),
            longt5_model_config,
        ),
        Family(
            "switch_transformers",
            "SwitchTransformersForConditionalGeneration",
            load_hf_switch,
            check_switch_compatible,
            switch_files,
            lambda cfg: cfg.position == "relative" and cfg.n_experts > 1,
            T5_KEYS | IDS,
            ("spiece.model",),
            switch_model_config,
        ),
        Family(
            "marian",
            "MarianMTModel",
            load_hf_marian,
            check_marian_compatible,
            marian_files,
            lambda cfg: vaswani_sinusoids(cfg) and cfg.norm_position == "post",
            BART_KEYS | IDS,
            ("source.spm", "target.spm", "vocab.json"),
            config_read_alone(marian_config_from_hf),
        ),
        Family(
            "pegasus",
            "PegasusForConditionalGeneration",
            load_hf_pegasus,
            check_pegasus_compatible,
            pegasus_files,
            lambda cfg: vaswani_sinusoids(cfg) and cfg.norm_position == "pre",
            BART_KEYS | IDS,
            ("spiece.model",),
            config_read_alone(pegasus_config_from_hf),
        ),
        Family(
            "bart",
            "BartForConditionalGeneration",
            load_hf_bart,
            check_bart_compatible,
            bart_files,
            lambda cfg: cfg.position == "learned" and cfg.norm_position == "post",
            BART_KEYS | IDS,
            ("vocab.json", "merges.txt"),
            config_read_alone(bart_config_from_hf),
        ),
        Family(
            "mbart",
            "MBartForConditionalGeneration",
            load_hf_mbart,
            check_mbart_compatible,
            bart_files,
            lambda cfg: cfg.position == "learned" and cfg.norm_position == "pre",
            BART_KEYS | IDS,
            ("sentencepiece.bpe.model",),
            config_read_alone(mbart_config_from_hf),
        ),
        Family(
            "m2m_100",
            "M2M100ForConditionalGeneration",
            load_hf_m2m100,
            check_m2m100_compatible,
            m2m100_files,
            lambda cfg: cfg.position == "sinusoidal" and cfg.sinusoidal_layout == "fairseq",
            BART_KEYS | IDS,
            ("sentencepiece.bpe.model", "vocab.json"),  # NLLB's, M2M100's (beside its spm)
            m2m100_config,
        ),
        Family(
            "t5gemma",
            "T5GemmaForConditionalGeneration",
            load_hf_t5gemma,
            check_t5gemma_compatible,
            t5gemma_files,
            lambda cfg: cfg.position == "rope" and cfg.norm == "gemma_rmsnorm" and not cfg.merged_cross_attention,
            T5GEMMA_KEYS | IDS,
            ("tokenizer.model",),  # Gemma's SentencePiece model beside its tokenizer.json
            t5gemma_config,
        ),
        Family(
            "t5gemma2",
            "T5Gemma2ForConditionalGeneration",
            load_hf_t5gemma2,
            check_t5gemma2_compatible,
            t5gemma2_files,
            lambda cfg: cfg.merged_cross_attention,
            T5GEMMA2_KEYS | IDS,
            ("tokenizer.model",),
            t5gemma2_config,
        ),
        # decoder-only: a decoder_only model exports as Gemma 3 with Gemma's RMSNorm and qk_norm, Gemma 2 with Gemma's
        # RMSNorm alone; else as Qwen3 with qk_norm, Qwen2 with q, k and v biases, else Llama
        gemma_layout("gemma2", "Gemma2ForCausalLM", lambda cfg: cfg.norm == "gemma_rmsnorm" and not cfg.qk_norm),
        gemma_layout("gemma3_text", "Gemma3ForCausalLM", lambda cfg: cfg.norm == "gemma_rmsnorm" and cfg.qk_norm),
        llama_layout(
            "llama",
            "LlamaForCausalLM",
            lambda cfg: not cfg.qk_norm and cfg.attention_bias != "qkv",
            ("tokenizer.model",),  # Llama 2's SentencePiece model (Llama 3 ships tokenizer.json alone)
        ),
        llama_layout(
            "qwen2", "Qwen2ForCausalLM", lambda cfg: cfg.attention_bias == "qkv", ("vocab.json", "merges.txt")
        ),
        llama_layout("qwen3", "Qwen3ForCausalLM", lambda cfg: cfg.qk_norm, ("vocab.json", "merges.txt")),
    )
}


def family_for(cfg: ModelConfig) -> Family | None:
    """The family a model of `cfg`'s layout is written as (None: no Hugging Face family has its layout), among
    those of its model family; one read from a family whose layout another shares (mT5's, T5 v1.1's) is written
    as the family it names."""
    if cfg.hf_model_type is not None:
        return FAMILIES[cfg.hf_model_type]
    ours = (family for family in FAMILIES.values() if family.model_family == cfg.family)
    return next((family for family in ours if family.writes(cfg)), None)
