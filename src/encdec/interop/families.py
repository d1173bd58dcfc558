"""The registry: every Hugging Face family encdec reads and writes, what `load_hf`, `export_hf`, peft's names,
the refusals that name config.json's keys and the files an export may replace all read.

A family is the model_type of a config.json, declared by its folder (interop/<family>/__init__.py's FAMILIES:
interop.family.Family): its loader and config reading, its check and writer, which of our layouts it is written
for, its weight names, the config.json keys our fields are read from, its tokenizer files and the transformers
class it exports to. A folder is made known by its line below. Each is read into one of encdec's model families
(`model_family`): the sequence-to-sequence ones into the encoder-decoder, Gemma 2, Gemma 3's text model, Llama,
Qwen2 and Qwen3 into the decoder-only family; a model is written only as a family of its own model family, the
first of the registry's order whose `writes` holds.
"""

from collections.abc import Callable
from functools import partial

from encdec.interop import bart, longt5, m2m100, marian, mt5, pegasus, switch, t5
from encdec.interop.family import IDS, Family
from encdec.interop.hf_gemma import GEMMA_KEYS, check_gemma_compatible, config_from_gemma, gemma_files, load_hf_gemma
from encdec.interop.hf_llama import LLAMA_KEYS, check_llama_compatible, config_from_llama, llama_files, load_hf_llama
from encdec.interop.hf_t5gemma import (
    T5GEMMA_KEYS,
    check_t5gemma_compatible,
    load_hf_t5gemma,
    t5gemma_config,
    t5gemma_files,
    t5gemma_name,
)
from encdec.interop.hf_t5gemma2 import (
    T5GEMMA2_KEYS,
    check_t5gemma2_compatible,
    load_hf_t5gemma2,
    t5gemma2_config,
    t5gemma2_files,
    t5gemma2_name,
    text_model,
)
from encdec.models import ModelConfig


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


FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        *t5.FAMILIES,
        *mt5.FAMILIES,
        *longt5.FAMILIES,
        *switch.FAMILIES,
        *marian.FAMILIES,
        *pegasus.FAMILIES,
        *bart.FAMILIES,
        *m2m100.FAMILIES,
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
            rename=lambda cfg: t5gemma_name,
            encoder_widths=True,
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
            rename=lambda cfg: t5gemma2_name,
            module_name=text_model,
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
