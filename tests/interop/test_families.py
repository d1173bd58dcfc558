"""The Hugging Face families are one table (interop.families) that export_hf, load_hf and the tokenizer files
read: every family in it writes the layout it claims, reads back what it wrote, and ships tokenizer files
encdec recognises; a model_type outside it is one sentence naming the table's families."""

import json

import pytest
import torch

import encdec
from encdec.errors import CheckpointError, ConfigError
from encdec.interop import export_hf, load_hf
from encdec.interop.families import FAMILIES, family_for
from encdec.interop.to_hf import EXPORT_NAMES, hf_layout
from encdec.tokenizers import build_tokenizer
from encdec.tokenizers.pretrained import TOKENIZER_FILES

BART = {"position": "learned", "position_offset": 2, "embedding_norm": True, "activation": "gelu"}
GEMMA = {  # T5Gemma's layout: Gemma 2's norms, caps, window and token tables, RoPE in self-attention alone
    "norm": "gemma_rmsnorm",
    "post_norms": True,
    "activation": "gated_gelu",
    "rope_cross": "none",
    "scale_attention": True,
    "scale_embeddings": True,
    "scale_output": False,
    "shared_embeddings": False,
    "sliding_window": 2,
    "attention_softcap": 50.0,
    "logit_softcap": 30.0,
}
LLAMA = {"position": "rope", "norm": "rmsnorm", "activation": "swiglu", "tie_embeddings": False}  # decoder-only
GEMMA_LM = {  # Gemma 2's decoder-only layout: Gemma's norms before and after each sublayer, its window and caps
    "position": "rope",
    "norm": "gemma_rmsnorm",
    "post_norms": True,
    "activation": "gated_gelu",
    "scale_embeddings": True,
    "sliding_window": 2,
    "logit_softcap": 30.0,
}
LAYOUTS = {  # model_type -> a tiny model of its layout (preset, overrides): every family in the table has one
    "t5": ("t5-tiny", {}),
    "mt5": ("t5-v1.1-tiny", {"hf_model_type": "mt5"}),
    "umt5": ("t5-v1.1-tiny", {"relative_bias_per_layer": True}),
    "longt5": ("t5-tiny", {"encoder_attention": "transient_global", "local_radius": 1, "global_block_size": 2}),
    "switch_transformers": ("t5-tiny", {"n_experts": 2}),
    "marian": ("transformer-tiny", {}),
    "pegasus": ("transformer-tiny", {"norm_position": "pre"}),
    "bart": ("transformer-tiny", BART),
    "plbart": ("transformer-tiny", {**BART, "hf_model_type": "plbart"}),
    "mvp": ("transformer-tiny", {**BART, "hf_model_type": "mvp"}),
    "led": (
        "transformer-tiny",
        {
            **BART,
            "position_offset": 0,
            "scale_embeddings": False,
            "hf_model_type": "led",
            "encoder_attention": "local_global",
            "local_radius": 2,
        },
    ),
    "mbart": ("transformer-tiny", {**BART, "norm_position": "pre"}),
    "blenderbot": ("transformer-tiny", {"position": "learned", "activation": "gelu", "norm_position": "pre"}),
    "blenderbot-small": (
        "transformer-tiny",
        {**BART, "position_offset": 0, "embeddings": {"decoder_norm_first": True}},
    ),
    "m2m_100": ("transformer-tiny", {"sinusoidal_layout": "fairseq", "norm_position": "pre"}),
    "nllb-moe": (  # M2M100's layout with top-2 experts in the last layer of each step, some tokens dropped
        "transformer-tiny",
        {
            "sinusoidal_layout": "fairseq",
            "norm_position": "pre",
            "experts": {"count": 3, "every": 2, "place": "last", "top_k": 2, "renormalize": True, "activation": "relu"}
            | {"eval_capacity_fraction": 0.5, "route_padding": False},
        },
    ),
    "fsmt": (
        "transformer-tiny",
        {"sinusoidal_layout": "fairseq", "shared_embeddings": False, "encoder": {"vocab_size": 400}},
    ),
    "t5gemma": ("rot5-tiny", GEMMA),
    "t5gemma2": (
        "rot5-tiny",
        {
            **GEMMA,
            "shared_embeddings": True,
            "qk_norm": True,
            "merged_cross_attention": True,
            "sliding_window_layout": "split",
            "rope_local_theta": 100.0,
            "rope_scale": 2.0,
            "eoi_token_id": 5,
        },
    ),
    "gemma2": ("decoder_only-tiny", {**GEMMA_LM, "attention_softcap": 50.0, "tie_embeddings": False}),
    "gemma3_text": (
        "decoder_only-tiny",
        {**GEMMA_LM, "qk_norm": True, "rope_local_theta": 100.0, "rope_scale": 2.0, "global_every": 3},
    ),
    "llama": ("decoder_only-tiny", LLAMA),
    "qwen2": ("decoder_only-tiny", {**LLAMA, "attention_bias": "qkv", "tie_embeddings": True}),
    "qwen3": ("decoder_only-tiny", {**LLAMA, "qk_norm": True, "d_head": 32}),
    "whisper": (  # its encoder reads log-mels (sources()), two convolutions and 50 positions' sinusoids deep
        "whisper-tiny",
        {"d_model": 32, "n_heads": 4, "d_ff": 64, "n_encoder_layers": 2, "audio": {"max_source_positions": 50}},
    ),
}


def sources(model: torch.nn.Module) -> torch.Tensor:
    """A source the model reads: 4 token ids, or a clip of log-mels (the whisper family's)."""
    if model.config.family == "whisper":
        return torch.randn(1, model.config.audio.n_mels, 100, generator=torch.Generator().manual_seed(0))
    return torch.tensor([[5, 6, 7, 1]])


def tiny(model_type: str, tokenizer) -> torch.nn.Module:
    preset, overrides = LAYOUTS[model_type]
    ids = {"pad_id": tokenizer.pad_id, "eos_id": tokenizer.eos_id, "decoder_start_id": tokenizer.decoder_start_id}
    torch.manual_seed(0)
    return encdec.build_model(encdec.preset(preset, vocab_size=tokenizer.vocab_size, **ids, **overrides)).eval()


def test_every_family_has_a_layout_here():
    assert set(LAYOUTS) == set(FAMILIES)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_each_family_writes_its_layout_and_reads_back_the_same_model(model_type, tmp_path):
    tokenizer = build_tokenizer("byte")
    model = tiny(model_type, tokenizer)
    family = FAMILIES[model_type]
    assert family_for(model.config) is family and hf_layout(model.config) == model_type
    assert export_hf(model, tokenizer, tmp_path / "hf") == family.hf_class
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert written["model_type"] == model_type and written["architectures"] == [family.hf_class]
    loaded = load_hf(tmp_path / "hf")
    src, tgt = sources(model), torch.tensor([[0, 9, 8]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(src, tgt).logits, model(src, tgt).logits)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_family_s_weight_names_are_one_table_read_both_ways(model_type, tmp_path):
    """interop.family.NameMap: each tensor an export writes is named by the family's one table, and that table read
    backwards names a parameter of ours the table reads forwards to the same name (several of ours may share one)."""
    tokenizer = build_tokenizer("byte")
    model = tiny(model_type, tokenizer)
    family = FAMILIES[model_type]
    names = family.names(model.config)
    ours = set(model.state_dict())
    assert {names.hf(name) for name in ours} <= set(family.files(model)[0])
    for name in ours:
        back = names.ours(names.hf(name))
        assert back in ours and names.hf(back) == names.hf(name), name


@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_family_s_tokenizer_files_are_recognised_and_an_export_may_replace_them(model_type):
    files = FAMILIES[model_type].tokenizer_files
    assert set(files) & set(TOKENIZER_FILES)  # a directory holding them is seen to hold a tokenizer
    assert set(files) <= EXPORT_NAMES


def test_a_model_type_outside_the_table_names_the_table_s_families(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(CheckpointError) as error:
        load_hf(tmp_path)
    assert str(error.value).endswith(f"supported: {', '.join(FAMILIES)}")


@pytest.mark.parametrize(
    "hf_class, config, prefix",
    [
        ("T5ForConditionalGeneration", dict(d_model=16, d_kv=4, d_ff=32, num_layers=2, num_heads=4), ""),
        ("BartForConditionalGeneration", dict(d_model=16, encoder_layers=1, decoder_layers=1), "model."),
    ],
)
def test_a_stack_s_own_token_table_is_refused_not_read_as_the_shared_one(tmp_path, hf_class, config, prefix):
    """A checkpoint whose encoder keeps a token table other than the shared one (written by hand or by another
    library) would compute other logits in encdec, whose stacks share one: one sentence instead."""
    import transformers
    from safetensors.torch import load_file, save_file

    model_class = getattr(transformers, hf_class)
    config = model_class.config_class(vocab_size=64, decoder_start_token_id=0, **config)
    model_class(config).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights[f"{prefix}encoder.embed_tokens.weight"] = weights[f"{prefix}shared.weight"] + 1
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=f"{prefix}encoder.embed_tokens.weight differs from {prefix}shared"):
        encdec.load_hf(tmp_path)


def test_a_model_type_no_family_writes_is_refused_at_export_in_one_sentence():
    """hf_model_type names a family of the registry (mT5, PLBart, MVP: layouts another family shares): any other
    is one sentence when an export asks which family writes the model."""
    cfg = encdec.preset("transformer-tiny", vocab_size=300, **BART, hf_model_type="gpt2")
    with pytest.raises(ConfigError, match="^model.hf_model_type 'gpt2' is not a Hugging Face family encdec writes"):
        hf_layout(cfg)
