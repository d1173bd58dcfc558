"""A decoder-only model adapted into an encoder-decoder (training.adaptation, T5Gemma's recipe): from a Hugging
Face Gemma 2 directory, the encoder-decoder's blocks equal the source's before training (both stacks' blocks
its blocks, cross-attention its self-attention, the token table and the final norms its own); `encdec train`
with `training.init_from` and `model.family: encoder_decoder` writes what came from where, trains with UL2's
S denoiser (PrefixLM), resumes bitwise and exports as T5Gemma, which transformers reloads with encdec's logits;
a source setting an encoder-decoder lacks is one sentence. The unbalanced variant (training.init_decoder_from):
the encoder from a wider and deeper Gemma 2, the decoder from the smaller one, the cross-attention's keys and
values fresh and warmed up alone (training.cross_attention_warmup) with every copied weight held, a resume
within the warm-up bitwise, and an export transformers reloads. A run's model section adapts with the
decoder-only family's defaults."""

import json
from dataclasses import replace

import pytest
import torch
import yaml

import encdec
from encdec.cli import main
from encdec.errors import ConfigError
from encdec.models import ModelConfig
from encdec.models.config_specs import overlaid
from encdec.runs.checkpoint import load_weights
from encdec.runs.model_section import ModelSection
from encdec.runs.run_dir import RunDir
from encdec.training.adaptation import adapted_section, adapted_weights, source_name
from encdec.training.init_from import check_weights_fit, load_pretrained
from tests.interop.gemma_kit import VOCAB, tokenizer_json

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


def saved_gemma2(path, seed: int, **sizes):
    """A random-weight Gemma 2 causal LM (every weight moved off its initial value) with a Gemma tokenizer."""
    config = transformers.Gemma2Config(
        **{
            "vocab_size": VOCAB,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "sliding_window": 8,
            "max_position_embeddings": 128,
            "pad_token_id": 0,
            "eos_token_id": 1,
            "bos_token_id": 2,
        }
        | sizes
    )
    torch.manual_seed(seed)
    model = transformers.Gemma2ForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(path)
    tokenizer_json(path)
    return path


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    return saved_gemma2(tmp_path_factory.mktemp("gemma2"), seed=0)


@pytest.fixture(scope="module")
def wider_gemma2(tmp_path_factory):
    """A wider and deeper Gemma 2 of the same family and tokenizer: the unbalanced adaptation's encoder."""
    path = tmp_path_factory.mktemp("wider_gemma2")
    return saved_gemma2(path, seed=1, hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=6)


def test_the_adapted_blocks_are_the_source_s_before_training(gemma2):
    pretrained = load_pretrained(str(gemma2))
    assert pretrained.model_section["family"] == "decoder_only"
    section = adapted_section(pretrained.model_section)
    cfg = ModelConfig.from_dict(section)
    assert (cfg.family, cfg.n_encoder_layers, cfg.decoder_layers, cfg.cross_attention.rope) == (
        "encoder_decoder",
        2,
        2,
        "none",
    )
    model = encdec.build_model(cfg)
    weights, copied, fresh = adapted_weights(model.state_dict(), pretrained.weights)
    assert fresh == []
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


def run_config(path, source, tinystories_path, steps: int, **training):
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
            **training,
        },
        "evaluation": {"interval": 2, "steps": 1},
        "output": {"save_interval": 2, "keep_last": 2, "plot": False},
    }
    path.write_text(yaml.safe_dump(values))
    return path


def losses(run) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if row.get("kind") == "train"]


def assert_reloads_with_our_logits(run, exported) -> None:
    """transformers' model of the run's export computes the run's logits."""
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(exported, attn_implementation="eager").eval()
    ours = encdec.from_pretrained(run).eval()
    src = torch.randint(4, VOCAB, (2, 12), generator=torch.Generator().manual_seed(3))
    tgt = torch.randint(4, VOCAB, (2, 5), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        gap = (reloaded(input_ids=src, decoder_input_ids=tgt).logits - ours(src, tgt).logits).abs().max().item()
    assert gap < 1e-4


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
    assert_reloads_with_our_logits(whole, tmp_path / "hf")


def test_a_source_setting_an_encoder_decoder_lacks_is_one_sentence():
    section = {"family": "decoder_only", "n_encoder_layers": 2, "attention_bias": "qkv"}
    with pytest.raises(ConfigError, match="attention.bias 'qkv', which cannot be adapted"):
        adapted_section(section)


def test_the_unbalanced_adaptation_takes_each_stack_from_its_source_and_cross_keys_fresh(gemma2, wider_gemma2):
    encoder_source, decoder_source = load_pretrained(str(wider_gemma2)), load_pretrained(str(gemma2))
    section = adapted_section(encoder_source.model_section, decoder_source.model_section)
    cfg = ModelConfig.from_dict(section)
    assert (cfg.d_model, cfg.encoder_width, cfg.n_encoder_layers, cfg.decoder_layers) == (32, 48, 3, 2)
    assert (cfg.encoder_config().n_heads, cfg.encoder_config().d_ff, cfg.encoder_config().head_dim) == (6, 96, 8)
    model = encdec.build_model(cfg)
    initial = {name: value.clone() for name, value in model.state_dict().items()}
    weights, copied, fresh = adapted_weights(model.state_dict(), encoder_source.weights, decoder_source.weights)
    model.load_state_dict(weights)
    state, big, small = model.state_dict(), encoder_source.weights, decoder_source.weights
    for i in range(3):
        for part in ("self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o", "ffn.wi_0", "ffn.wo"):
            assert torch.equal(state[f"encoder.blocks.{i}.{part}.weight"], big[f"blocks.{i}.{part}.weight"])
    for i in range(2):
        for part in ("self_attn.q", "self_attn.k", "self_attn.o", "ffn.wi_1", "self_attn_post_norm"):
            assert torch.equal(state[f"decoder.blocks.{i}.{part}.weight"], small[f"blocks.{i}.{part}.weight"])
        # the cross-attention reads another model's states: all of it fresh, as the paper has it (keys and values
        # from the 48-wide encoder)
        for part in ("cross_attn.q", "cross_attn.k", "cross_attn.v", "cross_attn.o", "cross_attn_norm"):
            name = f"decoder.blocks.{i}.{part}.weight"
            assert name in fresh and name not in copied and torch.equal(state[name], initial[name])
        assert state[f"decoder.blocks.{i}.cross_attn.k.weight"].shape == (2 * 8, 48)
    assert torch.equal(state["encoder.embed.weight"], big["embed.weight"])
    assert torch.equal(state["decoder.embed.weight"], small["embed.weight"])
    assert torch.equal(state["encoder.final_norm.weight"], big["final_norm.weight"])
    assert copied["decoder.blocks.0.self_attn_norm.weight"] == "decoder:blocks.0.self_attn_norm.weight"
    assert copied["encoder.blocks.2.ffn.wo.weight"] == "encoder:blocks.2.ffn.wo.weight"
    assert set(copied) | set(fresh) == set(state) and len(fresh) == 2 * 6  # q k v o, pre- and post-norm a layer


def checkpoint_weights(run, step: int) -> dict[str, torch.Tensor]:
    return load_weights(RunDir(run).checkpoint(f"step_{step:08d}").model)


def test_an_unbalanced_run_warms_the_fresh_cross_attention_up_alone_then_trains_all_and_resumes_bitwise(
    gemma2, wider_gemma2, tinystories_path, tmp_path, capsys
):
    unbalanced = {"init_decoder_from": str(gemma2), "cross_attention_warmup": 2}
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    config = run_config(tmp_path / "a.yaml", wider_gemma2, tinystories_path, 4, **unbalanced)
    assert main(["train", str(config), "--out", str(whole)]) == 0
    assert "12 cross-attention weights initialised afresh" in capsys.readouterr().out
    record = json.loads((whole / "adaptation.json").read_text())
    assert record["decoder_source"] == str(gemma2) and len(record["fresh"]) == 12
    start = encdec.build_model(
        ModelConfig.from_dict(
            adapted_section(
                load_pretrained(str(wider_gemma2)).model_section, load_pretrained(str(gemma2)).model_section
            )
        )
    )
    weights, _, _ = adapted_weights(
        start.state_dict(), load_pretrained(str(wider_gemma2)).weights, load_pretrained(str(gemma2)).weights
    )
    after_warmup, after = checkpoint_weights(whole, 2), checkpoint_weights(whole, 4)
    for name in record["copied"]:  # held through the warm-up, trained after it
        if name in after_warmup:
            assert torch.equal(after_warmup[name], weights[name]), name
    assert any(not torch.equal(after[name], weights[name]) for name in record["copied"] if name in after)
    assert all(not torch.equal(after_warmup[name], after[name]) for name in record["fresh"])
    short = run_config(tmp_path / "b.yaml", wider_gemma2, tinystories_path, 2, **unbalanced)
    assert main(["train", str(short), "--out", str(parts)]) == 0
    assert main(["train", str(short), "--out", str(parts), "--resume", "--set", "training.steps=4"]) == 0
    assert losses(parts) == losses(whole) and len(losses(whole)) == 4
    capsys.readouterr()
    assert main(["export", str(whole), "--out", str(tmp_path / "hf")]) == 0  # T5Gemma holds an encoder of its own width
    assert_reloads_with_our_logits(whole, tmp_path / "hf")


def test_what_an_unbalanced_adaptation_refuses_is_one_sentence(
    gemma2, wider_gemma2, tinystories_path, tmp_path, capsys
):
    other = overlaid(load_pretrained(str(gemma2)).model_section, {"attention": {"sliding_window": 4}})
    with pytest.raises(
        ConfigError, match="differ in attention.sliding_window .8 and 4.; an unbalanced adaptation joins"
    ):
        adapted_section(load_pretrained(str(wider_gemma2)).model_section, other)
    alone = run_config(tmp_path / "b.yaml", gemma2, tinystories_path, 2, cross_attention_warmup=2)
    assert main(["train", str(alone), "--out", str(tmp_path / "alone")]) == 2
    assert "set training.init_decoder_from, or drop the warm-up" in capsys.readouterr().err


def test_a_key_that_reshapes_a_copied_weight_is_one_sentence_and_the_fresh_cross_attention_is_the_run_s(
    gemma2, wider_gemma2, tinystories_path, tmp_path, capsys
):
    """Beside an adaptation too, a model key that changes the shape of a weight the source gives is refused before
    the run directory is made (issue 58); the unbalanced adaptation's cross-attention is fresh, so its shape is
    the run's to choose, while the balanced one copies it from self-attention."""
    config = run_config(tmp_path / "a.yaml", gemma2, tinystories_path, 2)
    capsys.readouterr()
    assert main(["train", str(config), "--out", str(tmp_path / "run"), "--set", "model.d_ff=96"]) == 2
    assert capsys.readouterr().err == (
        "encdec: error: model.d_ff 96 contradicts training.init_from's model (d_ff 64): its weights would not fit; "
        "drop the key or train from scratch\n"
    )
    assert not (tmp_path / "run").exists()
    encoder_source, decoder_source = load_pretrained(str(wider_gemma2)), load_pretrained(str(gemma2))
    asked = ModelSection({"family": "encoder_decoder", "cross_attention": {"n_kv_heads": 1}}, overlay=True)
    unbalanced = replace(
        encoder_source,
        model_section=adapted_section(encoder_source.model_section, decoder_source.model_section),
        adapted=True,
        decoder=decoder_source,
    )
    check_weights_fit(asked.over(unbalanced.model_section), unbalanced)
    balanced = replace(decoder_source, model_section=adapted_section(decoder_source.model_section), adapted=True)
    with pytest.raises(ConfigError, match=r"^model.cross_attention.n_kv_heads 1 contradicts training.init_from's"):
        check_weights_fit(asked.over(balanced.model_section), balanced)


def test_a_run_s_section_adapts_with_the_decoder_only_family_s_defaults_and_the_decoder_computes_the_source():
    """A run's config.yaml leaves scale_attention, scale_output and init to the family: the adapted model keeps
    the decoder-only family's (not T5's), so with its cross-attention silenced its decoder is the source."""
    raw = {
        "family": "decoder_only",
        "d_model": 32,
        "n_heads": 4,
        "n_kv_heads": 2,
        "d_ff": 48,
        "n_encoder_layers": 2,
        "activation": "swiglu",
        "position": "rope",
        "max_positions": 64,
        "dropout": 0.0,
    }
    section = adapted_section(raw)
    assert (section["attention"]["scale"], section["output"]["scale"], section["init"]) == (True, False, "normal")
    torch.manual_seed(0)
    source = encdec.build_model(ModelConfig.from_dict({**raw, "vocab_size": 100})).eval()
    model = encdec.build_model(ModelConfig.from_dict({**section, "vocab_size": 100})).eval()
    weights, _, _ = adapted_weights(model.state_dict(), source.state_dict())
    for i in range(2):
        weights[f"decoder.blocks.{i}.cross_attn.o.weight"] = torch.zeros_like(
            weights[f"decoder.blocks.{i}.cross_attn.o.weight"]
        )
    model.load_state_dict(weights)
    ids = torch.randint(3, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = source(None, ids).logits
        got = model(torch.randint(3, 100, (2, 5)), ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_the_source_teaches_its_adaptation_reading_each_row_as_source_then_target(
    gemma2, tinystories_path, tmp_path, capsys
):
    """training.distill.teacher: the decoder-only source itself. Its logits for an encoder-decoder row are those
    of the stream opener + the source's real tokens + the target, at the positions before each target token."""
    from encdec.data.batch import IGNORE_INDEX, Batch
    from encdec.training.distill import stream_logits, teacher_streams
    from encdec.training.run_config import load_config

    source = encdec.load_hf(gemma2).eval()
    ids = torch.Generator().manual_seed(5)
    src = torch.randint(4, VOCAB, (2, 7), generator=ids)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3], dtype=torch.bool)
    labels = torch.randint(4, VOCAB, (2, 5), generator=ids)
    labels[1, 3:] = IGNORE_INDEX  # the second row's target is 3 tokens
    batch = Batch(tgt_ids=labels.clamp(min=0), labels=labels, src_ids=src, src_mask=mask)
    dropped = torch.tensor([1, 0])  # EOS and pad left out of the streams
    src[0, 2] = 1  # an EOS inside the first source: left out
    got = stream_logits(source, batch, dropped, opener=1)
    with torch.no_grad():
        for row, (n_target) in enumerate((5, 3)):
            kept = [t for t, m in zip(src[row].tolist(), mask[row].tolist()) if m and t not in (0, 1)]
            stream = torch.tensor([[1, *kept, *labels[row, :n_target].tolist()]])
            expected = source(None, stream).logits[0, len(kept) : len(kept) + n_target]
            torch.testing.assert_close(got[row, :n_target], expected, rtol=1e-5, atol=1e-5)
    run = tmp_path / "run"
    config = run_config(
        tmp_path / "a.yaml", gemma2, tinystories_path, 2, distill={"teacher": str(gemma2), "alpha": 0.5}
    )
    assert main(["train", str(config), "--out", str(run)]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(row["distill_kl"] >= 0 for row in rows if row.get("kind") == "train")
    ul2 = yaml.safe_load(config.read_text())
    ul2["objective"]["ul2_probabilities"] = [0.25, 0.25, 0.5]
    config.write_text(yaml.safe_dump(ul2))
    with pytest.raises(ConfigError, match="teaches an encoder-decoder on rows it can read as one text: PrefixLM"):
        teacher_streams(load_config(config), "the teacher", None, None)  # span corruption's pieces: refused
    capsys.readouterr()
    assert main(["train", str(config), "--out", str(tmp_path / "ul2")]) == 2  # and Gemma's tokenizer has no sentinels
    assert "marks spans with sentinels, which this tokenizer has none of" in capsys.readouterr().err
    assert not (tmp_path / "ul2" / "checkpoints").exists()
