"""configs/recipes/adapt_qwen3_0.6b.yaml (T5Gemma's adaptation of Qwen/Qwen3-0.6B, for a GPU; not run here): it
loads through the run config's schema offline, its model section is the one the adaptation makes of Qwen3-0.6B's
config.json as encdec's Qwen3 loader reads it (the key mapping checked on a tiny random Qwen3 checkpoint, whose
weights fill the adapted model), and `encdec size` counts it as the arithmetic of its matrices does, as its
header says."""

import re
from pathlib import Path

import pytest
import torch
import yaml

import encdec
from encdec.cli import main
from encdec.interop.llama import config_from_llama
from encdec.models import ModelConfig
from encdec.models.config_specs import moved_to_specs, overlaid
from encdec.runs.model_section import build_model_config
from encdec.training.adaptation import adapted_section, adapted_weights, wants_adaptation
from encdec.training.flops import PEAK_TFLOPS, step_flops
from encdec.training.init_from import load_pretrained, model_section
from encdec.training.run_config import load_config

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "recipes" / "adapt_qwen3_0.6b.yaml"
QWEN3_0_6B = {  # Qwen/Qwen3-0.6B's config.json, the keys encdec's loader reads (interop/hf_llama.py)
    "model_type": "qwen3",
    "vocab_size": 151936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "rope_scaling": None,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "sliding_window": None,
    "use_sliding_window": False,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}
SIZES = ("vocab_size", "d_model", "d_ff", "n_heads", "n_kv_heads", "d_head", "n_encoder_layers", "n_decoder_layers")
IDS = ("pad_id", "eos_id", "decoder_start_id")  # the checkpoint's, under the recipe's keys


pytestmark = pytest.mark.usefixtures("no_network")  # the recipe is read and sized offline


def recipe_section() -> dict:
    return yaml.safe_load(RECIPE.read_text())["model"]


def adapted_qwen3_0_6b() -> dict:
    return adapted_section(model_section(config_from_llama(QWEN3_0_6B)))


def test_the_recipe_loads_through_the_run_config_schema():
    cfg = load_config(RECIPE)
    assert cfg.training.init_from == "Qwen/Qwen3-0.6B" and cfg.model["family"] == "encoder_decoder"
    assert (cfg.objective.kind, cfg.objective.ul2_probabilities) == ("ul2", [0.0, 0.0, 1.0])  # PrefixLM: no sentinels
    assert (cfg.training.precision, cfg.training.device) == ("bf16", "cuda")
    assert (cfg.data.format, cfg.data.dataset, cfg.data.streaming) == ("datasets", "allenai/c4", True)
    assert cfg.training.batch_size * cfg.training.grad_accum == 128


def test_the_model_section_is_qwen3_0_6b_adapted():
    adapted, ours = adapted_qwen3_0_6b(), recipe_section()
    assert wants_adaptation(model_section(config_from_llama(QWEN3_0_6B)), ours)
    assert overlaid(adapted, ours) == overlaid(adapted, {})  # what training merges over the checkpoint's: no change
    assert set(moved_to_specs(ours)) <= set(adapted)  # every key the recipe sets, the adapted section has
    ids = {key: adapted[key] for key in IDS}
    assert ids == {"pad_id": 151645, "eos_id": 151645, "decoder_start_id": 151643}
    assert build_model_config(ours, ours["vocab_size"], *ids.values()) == ModelConfig.from_dict(adapted)


@pytest.mark.usefixtures("one_thread")
def test_a_tiny_qwen3_checkpoint_adapts_to_the_recipe_s_settings(tmp_path):
    """A random Qwen3 of Qwen3-0.6B's keys at toy sizes (head_dim apart from hidden / heads, a tied head, RoPE
    base 1e6) read by the loader: its adapted section is the recipe's but for sizes and ids, and its weights fill
    the model that section builds, cross-attention (q and k norms too) from self-attention."""
    transformers = pytest.importorskip("transformers")
    sizes = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    keys = {k: v for k, v in QWEN3_0_6B.items() if k not in ("model_type", "rope_theta", "rope_scaling", *sizes)}
    keys |= {"num_key_value_heads": 2, "head_dim": 32, "bos_token_id": 2, "eos_token_id": 3}
    config = transformers.Qwen3Config(**sizes, **keys, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    torch.manual_seed(0)
    hf = transformers.Qwen3ForCausalLM(config)
    with torch.no_grad():
        for parameter in hf.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    hf.save_pretrained(tmp_path / "qwen3")
    pretrained = load_pretrained(str(tmp_path / "qwen3"))
    adapted, ours = adapted_section(pretrained.model_section), recipe_section()
    assert (adapted["d_head"], adapted["n_decoder_layers"], adapted["embeddings"]["tie"]) == (32, 2, True)
    settings = {key: value for key, value in ours.items() if key not in SIZES}
    assert overlaid(adapted, settings) == overlaid(adapted, {})  # the recipe's settings: the adapted section's
    cfg = ModelConfig.from_dict(adapted)
    assert cfg == ModelConfig.from_dict({**adapted, **settings})
    model = encdec.build_model(cfg)
    weights, copied = adapted_weights(model.state_dict(), pretrained.weights)[:2]
    model.load_state_dict(weights)
    state, source = model.state_dict(), pretrained.weights
    for part in ("q", "k", "v", "o", "q_norm", "k_norm"):
        name = f"decoder.blocks.1.cross_attn.{part}.weight"
        assert copied[name] == f"blocks.1.self_attn.{part}.weight" and torch.equal(state[name], source[copied[name]])
    tables = {state[name].data_ptr(): state[name] for name in state if name.endswith("embed.weight")}
    assert len(tables) == 2  # a table each stack (one the head's too), both Qwen's at first
    assert all(torch.equal(table, source["embed.weight"]) for table in tables.values())


def adapted_qwen3_0_6b_parameters() -> int:
    """Counted by hand: Qwen3-0.6B's block (GQA 16 query heads of 128 over 8 KV heads, q and k norms of 128,
    SwiGLU, two norms) in each stack, a cross-attention as wide (with its norms) in each decoder block, each
    stack's final norm and a token table each stack, the decoder's the head."""
    d, q, kv, ff, layers, vocab = 1024, 16 * 128, 8 * 128, 3072, 28, 151936
    attention = d * q + 2 * d * kv + q * d + 2 * 128
    block = attention + 3 * d * ff + 2 * d
    assert layers * block == 440_466_432  # the model card's 0.44B without embeddings
    return 2 * layers * block + layers * (attention + d) + 2 * d + 2 * vocab * d


def test_encdec_size_counts_the_adapted_model(capsys):
    assert main(["size", str(RECIPE)]) == 0
    out = capsys.readouterr().out
    counted = int(re.search(r"parameters: +([\d,]+)", out).group(1).replace(",", ""))
    assert counted == adapted_qwen3_0_6b_parameters() == 1_368_296_448
    assert "vocabulary 151,936" in out


def test_the_header_says_how_to_run_it_and_its_estimated_cost():
    header = RECIPE.read_text().split("\nmodel:")[0]
    assert "NOT RUN HERE: needs a GPU and the Hub; cost estimated by encdec size" in header
    assert "encdec train configs/recipes/adapt_qwen3_0.6b.yaml --out runs/" in header
    assert "# Cost (estimated, not measured): 1,368,296,448 parameters" in header and "H100" in header
    cfg = load_config(RECIPE)
    t, length = cfg.training, cfg.objective.seq_len
    model = cfg.model.over({}).build(cfg.model["vocab_size"], 0, 1, 0)  # an overlay (init_from), built alone
    per_step = step_flops(model, t.batch_size * t.grad_accum, length // 2, length - length // 2 + 1)
    total = per_step * t.steps

    def e(x: float) -> str:
        return f"{x:.2e}".replace("e+", "e")

    assert f"is {e(per_step)} FLOPs" in header and f"{t.steps:,} steps are {e(total)} FLOPs" in header
    hours = total / (PEAK_TFLOPS["H100"][0] * 1e12 * 0.35) / 3600  # the H100 SXM's bf16 peak, 989 TFLOP/s
    assert f"~{hours:.0f} h on one H100 SXM or H200 at 35% MFU" in header
