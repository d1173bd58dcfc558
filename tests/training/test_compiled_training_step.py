"""The trainer's step taken whole by torch.compile in every attention family: forward, loss and backward over 20
steps of a real run's batches (Multi30k pairs in bytes, padded, packed where the family packs, the epoch's last short batch
among them, lengths bucketed by training.bucket_length) with no graph break, one graph per bucketed shape, and the
compiled step's losses and gradients equal to eager's within 1e-5 (fp32).

The backend is "aot_eager": AOTAutograd traces the forward and its backward into graphs as inductor would receive
them (so the backward is taken whole too), run by eager kernels, in a fraction of inductor's compile time.
"""

import copy
from contextlib import nullcontext

import pytest
import torch
import yaml
from model_kit import T5GEMMA

from encdec.data.batch import IGNORE_INDEX
from encdec.runs.run_dir import RunDir
from encdec.training import distributed, load_config, train
from encdec.training.loader import batch_stream, bucket_padding
from encdec.training.optim import build_optimizer
from encdec.training.optimizer_step import optimizer_step, step_loss
from encdec.training.run_config import RunConfig
from encdec.training.setup import Training, set_up

STEPS, BATCH, BUCKET, LONGEST = 20, 4, 48, 96  # rows of at most 96 tokens a side, padded to 48 or 96
PACKED = {"kind": "seq2seq", "max_source_len": LONGEST, "max_target_len": LONGEST, "pack": True}
UNPACKED = dict(PACKED, pack=False)
PREFIX_LM = {"kind": "prefix_lm", "seq_len": LONGEST}  # texts' chunks: their first half the prefix
FAMILIES = {  # name -> (preset, model overrides, objective)
    "t5": ("t5-tiny", {}, PACKED),
    "rot5-moe": ("rot5-tiny", dict(n_experts=4), PACKED),  # RoPE across, GQA, a mixture of experts
    "moe-top2-capacity": (  # NLLB-MoE's routing: two experts a token, a capacity, padding unrouted
        "rot5-tiny",
        dict(experts=dict(count=4, top_k=2, capacity=24, balance="all", route_padding=False)),
        PACKED,
    ),
    "umt5": ("t5-v1.1-tiny", dict(relative_bias_per_layer=True), PACKED),
    "t5gemma": ("rot5-tiny", dict(T5GEMMA, attention_softcap=2.0, logit_softcap=5.0), PACKED),
    "longt5-local": ("t5-tiny", dict(encoder_attention="local", local_radius=8), PACKED),
    "longt5-transient-global": (  # unpacked: its block keys would span packed examples (refused)
        "t5-tiny",
        dict(encoder_attention="transient_global", local_radius=8, global_block_size=4),
        UNPACKED,
    ),
    "transformer": ("transformer-tiny", {}, PACKED),
    "bart": ("transformer-tiny", dict(positions=dict(kind="learned", offset=2), embeddings=dict(norm=True)), PACKED),
    "decoder-only": ("decoder_only-tiny", dict(positions=dict(max=LONGEST)), PREFIX_LM),
}
# a mixture of experts runs its experts on the tokens routed to them eagerly and on every token compiled
# (modules.moe.MoE.dispatch_dense): each expert's gradient is summed over other rows, in another order
ROUTED = {"rot5-moe", "moe-top2-capacity"}


def tiny_config(tmp_path, shared_data, name: str, steps: int = STEPS, **training) -> RunConfig:
    """A tiny run of family `name` on 45 Multi30k pairs in bytes (a causal LM: on 45 DialogSum summaries),
    `training`'s keys over its own."""
    preset, overrides, objective = FAMILIES[name]
    multi30k, dialogsum = shared_data / "translation" / "multi30k", shared_data / "summarization" / "dialogsum"
    pairs = {
        "format": "parallel",
        "train": [str(multi30k / "train.en.gz"), str(multi30k / "train.de.gz")],
        "validation": [str(multi30k / "val.en.gz"), str(multi30k / "val.de.gz")],
    }
    summaries = [str(dialogsum / "dialogsum.train.jsonl.gz")]
    texts = {"format": "jsonl", "train": summaries, "text_field": "summary", "val_fraction": 0.1}
    config = {
        "model": {"preset": preset, "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0, **overrides},
        "tokenizer": {"kind": "byte"},
        "data": {**(texts if objective is PREFIX_LM else pairs), "max_documents": 45},  # 12 pairs' batches an epoch
        "objective": objective,
        "training": {"steps": steps, "batch_size": BATCH, "bucket_length": BUCKET, "seed": 3, "device": "cpu"},
        "evaluation": {"interval": steps, "steps": 1},
        "output": {"plot": False, "tensorboard": False, "log_interval": 1},
    }
    config["training"].update(training)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    return load_config(tmp_path / "run.yaml")


def tiny_run(tmp_path, shared_data, name: str) -> Training:
    """The set-up run (model, optimizer, data) of `tiny_config`."""
    cfg = tiny_config(tmp_path, shared_data, name)
    return set_up(cfg, RunDir(tmp_path / "run"), False, False, distributed.setup("cpu"))


def trained_losses(tmp_path, shared_data, name: str, out: str, **training) -> list[float]:
    """The logged training losses of 6 steps of `tiny_config`."""
    result = train(tiny_config(tmp_path, shared_data, name, steps=6, **training), tmp_path / out)
    return [r["loss"] for r in result.history if r["kind"] == "train"]


def record_gradients(model: torch.nn.Module, into: dict) -> None:
    """Each parameter's gradient, by name, into `into` as backward leaves it."""
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, name=name: into.update({name: p.grad.clone()}))


@pytest.mark.slow
@pytest.mark.parametrize("name", FAMILIES)
def test_a_compiled_training_step_has_no_graph_break_and_equals_eager(tmp_path, shared_data, name):
    t = tiny_run(tmp_path, shared_data, name)
    eager_model = copy.deepcopy(t.model)
    eager_optimizer = build_optimizer(eager_model, t.cfg)
    compiled, eager = {}, {}
    record_gradients(t.model, compiled)
    record_gradients(eager_model, eager)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    step = torch.compile(step_loss, backend="aot_eager", fullgraph=True, dynamic=False)
    pad = bucket_padding(BUCKET, BATCH, t.data.tokenizer.pad_id)
    shapes, real_rows = set(), []
    for _, loaded in zip(range(STEPS), batch_stream(t.data.train, None, t.info.device, 0, pad), strict=False):
        batch = loaded.batch
        shapes.add((batch.tgt_ids.shape, None if batch.src_ids is None else batch.src_ids.shape))
        real_rows.append(int((batch.labels != IGNORE_INDEX).any(dim=1).sum()))
        setting = (t.cfg, t.model_config, t.info, nullcontext())
        ce, _, _ = optimizer_step(t.model, t.optimizer, [loaded], *setting, loss_of=step)
        ce_eager, _, _ = optimizer_step(eager_model, eager_optimizer, [loaded], *setting)
        torch.testing.assert_close(ce, ce_eager, rtol=1e-5, atol=1e-5)
        assert compiled.keys() == eager.keys() and len(compiled) == len(list(t.model.parameters()))
        tolerance = 3e-5 if name in ROUTED else 1e-5  # of the gradient's largest entry (or of 1)
        for parameter, gradient in compiled.items():
            scale = max(1.0, eager[parameter].abs().max().item())
            torch.testing.assert_close(
                gradient, eager[parameter], rtol=0, atol=tolerance * scale, msg=lambda m, p=parameter: f"{p}: {m}"
            )
    assert min(real_rows) < BATCH  # the epoch's last batch (or a packed one) ran among the full ones
    assert not torch._dynamo.utils.counters["graph_break"]
    assert len(shapes) <= (LONGEST // BUCKET) ** 2  # rows padded to BATCH, lengths to 48 or 96
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == len(shapes)  # one compile a shape, no more


@pytest.mark.slow
def test_the_trainer_compiles_its_step_and_trains_to_the_eager_losses(tmp_path, shared_data, monkeypatch):
    """training.compile reaches the step the loop runs (here through aot_eager, whole): the same losses."""
    eager = trained_losses(tmp_path, shared_data, "rot5-moe", "eager")
    compile_whole = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda f, **_: compile_whole(f, backend="aot_eager", fullgraph=True, dynamic=False)
    )
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = trained_losses(tmp_path, shared_data, "rot5-moe", "compiled", compile=True)
    assert len(eager) == 6 and compiled == pytest.approx(eager, rel=1e-5)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # the loop's steps ran compiled


@pytest.mark.slow
def test_bucketed_batches_train_to_the_losses_of_batches_as_built(tmp_path, shared_data):
    """Padding lengths and rows (training.bucket_length) changes what is computed, not what it comes to."""
    built = trained_losses(tmp_path, shared_data, "t5", "built", bucket_length=None)
    bucketed = trained_losses(tmp_path, shared_data, "t5", "bucketed")
    assert len(built) == 6 and bucketed == pytest.approx(built, rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t5", "t5gemma"])
def test_the_chunked_loss_compiles_whole_and_equals_the_loss_of_the_whole_logits(tmp_path, shared_data, name):
    """A wide vocabulary's path (models.loss.chunked_loss, blocks of 16 rows: T5's head of one product with its
    gradients formed in the forward pass, T5Gemma's capped head checkpointed) traced with no graph break: the
    loss and every gradient those of the whole logits, eager, within 1e-5."""
    t = tiny_run(tmp_path, shared_data, name)
    assert (t.model.linear_head() is None) == (name == "t5gemma")
    whole = copy.deepcopy(t.model)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    step = torch.compile(step_loss, backend="aot_eager", fullgraph=True, dynamic=False)
    pad = bucket_padding(BUCKET, BATCH, t.data.tokenizer.pad_id)
    chunk = 16 * t.model_config.vocab_size  # 4 x 96 rows: 24 blocks
    for _, loaded in zip(range(3), batch_stream(t.data.train, None, t.info.device, 0, pad), strict=False):
        got, out = step(t.model, loaded.batch, t.model_config, 0.1, nullcontext(), chunk)
        expected, _ = step_loss(whole, loaded.batch, t.model_config, 0.1, nullcontext(), None)
        assert out.logits is None  # made by blocks
        torch.testing.assert_close(got.objective, expected.objective, rtol=1e-5, atol=1e-5)
        got.total.backward()
        expected.total.backward()
        for a, b in zip(t.model.parameters(), whole.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
            a.grad = b.grad = None
    assert not torch._dynamo.utils.counters["graph_break"]
