"""A decoder-only model adapted into an encoder-decoder (training.adaptation, T5Gemma's recipe): from a Hugging
Face Gemma 2 directory, the encoder-decoder's blocks equal the source's before training (both stacks' blocks
its blocks, cross-attention its self-attention, the token table and the final norms its own); `encdec train`
with `training.init_from` and `model.family: encoder_decoder` writes what came from where, trains with UL2's
S denoiser (PrefixLM), resumes bitwise and exports as T5Gemma, which transformers reloads with encdec's logits;
a source setting an encoder-decoder lacks is one sentence."""

import json

import pytest
import torch
import yaml

import encdec
from encdec.cli import main
from encdec.errors import ConfigError
from encdec.models import ModelConfig
from encdec.training.adaptation import adapted_section, adapted_weights, source_name
from encdec.training.init_from import load_pretrained
from tests.interop.gemma_kit import VOCAB, tokenizer_json

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    """A random-weight Gemma 2 causal LM (every weight moved off its initial value) with a Gemma tokenizer."""
    path = tmp_path_factory.mktemp("gemma2")
    config = transformers.Gemma2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=8,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(0)
    model = transformers.Gemma2ForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(path)
    tokenizer_json(path)
    return path


def test_the_adapted_blocks_are_the_source_s_before_training(gemma2):
    pretrained = load_pretrained(str(gemma2))
    assert pretrained.model_section["family"] == "decoder_only"
    section = adapted_section(pretrained.model_section)
    cfg = ModelConfig.from_dict(section)
    assert (cfg.family, cfg.n_encoder_layers, cfg.decoder_layers, cfg.rope_cross) == ("encoder_decoder", 2, 2, "none")
    model = encdec.build_model(cfg)
    weights, copied = adapted_weights(list(model.state_dict()), pretrained.weights)
    model.load_state_dict(weights)
    state, source = model.state_dict(), pretrained.weights
    for i in range(2):
        for stack in ("encoder", "decoder"):
            for part in ("self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o", "ffn.wi_0", "ffn.wo"):
                assert torch.equal(state[f"{stack}.blocks.{i}.{part}.weight"], source[f"blocks.{i}.{part}.weight"])
        for part in ("q", "k", "v", "o"):  # cross-attention from self-attention
            assert torch.equal(
                state[f"decoder.blocks.{i}.cross_attn.{part}.weight"], source[f"blocks.{i}.self_attn.{part}.weight"]
            )
        assert copied[f"decoder.blocks.{i}.cross_attn_norm.weight"] == f"blocks.{i}.self_attn_norm.weight"
    assert torch.equal(state["encoder.embed.weight"], source["embed.weight"])
    assert torch.equal(state["decoder.final_norm.weight"], source["final_norm.weight"])
    assert set(copied) == set(state) and all(source_name(name) in source for name in state)
    weights["encoder.blocks.0.self_attn.q.weight"].add_(1.0)  # copies: the source is not changed through them
    assert not torch.equal(weights["encoder.blocks.0.self_attn.q.weight"], source["blocks.0.self_attn.q.weight"])


def run_config(path, source, tinystories_path, steps: int):
    values = {
        "model": {"family": "encoder_decoder", "dropout": 0.0},
        "data": {"format": "tinystories", "train": [str(tinystories_path)], "max_documents": 200},
        "objective": {"kind": "ul2", "ul2_probabilities": [0.0, 0.0, 1.0], "seq_len": 48},  # PrefixLM: S alone
        "optimizer": {"lr": 1e-2},
        "schedule": {"kind": "constant", "warmup_steps": 0},  # the same lr whatever training.steps
        "training": {
            "steps": steps,
            "batch_size": 4,
            "seed": 0,
            "threads": 1,
            "device": "cpu",
            "init_from": str(source),
        },
        "evaluation": {"interval": 2, "steps": 1},
        "output": {"save_interval": 2, "keep_last": 2, "plot": False},
    }
    path.write_text(yaml.safe_dump(values))
    return path


def losses(run) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if row.get("kind") == "train"]


def test_a_run_adapted_from_a_hugging_face_directory_trains_resumes_bitwise_and_exports(
    gemma2, tinystories_path, tmp_path, capsys
):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert main(["train", str(run_config(tmp_path / "a.yaml", gemma2, tinystories_path, 4)), "--out", str(whole)]) == 0
    record = json.loads((whole / "adaptation.json").read_text())
    assert record["copied"]["decoder.blocks.1.cross_attn.v.weight"] == "blocks.1.self_attn.v.weight"
    assert "adapted the decoder-only model into an encoder-decoder" in capsys.readouterr().out
    short = run_config(tmp_path / "b.yaml", gemma2, tinystories_path, 2)
    assert main(["train", str(short), "--out", str(parts)]) == 0
    assert main(["train", str(short), "--out", str(parts), "--resume", "--set", "training.steps=4"]) == 0
    assert losses(parts) == losses(whole) and len(losses(whole)) == 4
    capsys.readouterr()
    assert main(["export", str(whole), "--out", str(tmp_path / "hf")]) == 0
    assert "T5GemmaForConditionalGeneration" in capsys.readouterr().out
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf", attn_implementation="eager").eval()
    ours = encdec.from_pretrained(whole).eval()
    src = torch.randint(4, VOCAB, (2, 12), generator=torch.Generator().manual_seed(3))
    tgt = torch.randint(4, VOCAB, (2, 5), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        gap = (reloaded(input_ids=src, decoder_input_ids=tgt).logits - ours(src, tgt).logits).abs().max().item()
    assert gap < 1e-4


def test_a_source_setting_an_encoder_decoder_lacks_is_one_sentence():
    section = {"family": "decoder_only", "n_encoder_layers": 2, "attention_bias": "qkv"}
    with pytest.raises(ConfigError, match="attention_bias 'qkv', which cannot be adapted"):
        adapted_section(section)
