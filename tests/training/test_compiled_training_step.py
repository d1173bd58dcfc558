"""The trainer's step taken whole by torch.compile in every attention family: forward, loss and backward over 20
steps of a real run's batches (DialogSum pairs, padded, packed where the family packs, the epoch's last short batch
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
from encdec.training import distributed, load_config
from encdec.training.loader import batch_stream, bucket_padding
from encdec.training.optim import build_optimizer
from encdec.training.optimizer_step import optimizer_step, step_loss
from encdec.training.setup import Training, set_up

STEPS, BATCH, BUCKET = 20, 4, 32
MAX_SOURCE, MAX_TARGET = 96, 64  # multiples of BUCKET: at most 3 x 2 bucketed shapes
FAMILIES = {  # name -> (preset, model overrides, objective.pack)
    "t5": ("t5-tiny", {}, True),
    "rot5-moe": ("rot5-tiny", dict(n_experts=4), True),  # RoPE across, GQA, a mixture of experts
    "umt5": ("t5-v1.1-tiny", dict(relative_bias_per_layer=True), True),
    "t5gemma": ("rot5-tiny", dict(T5GEMMA, attention_softcap=2.0, logit_softcap=5.0), True),
    "longt5-local": ("t5-tiny", dict(encoder_attention="local", local_radius=8), True),
    "longt5-transient-global": (
        "t5-tiny",
        dict(encoder_attention="transient_global", local_radius=8, global_block_size=4),
        False,  # its block keys would span packed examples (refused)
    ),
    "transformer": ("transformer-tiny", {}, True),
    "bart": ("transformer-tiny", dict(positions=dict(kind="learned", offset=2), embeddings=dict(norm=True)), True),
    "decoder-only": ("decoder_only-tiny", dict(positions=dict(max=MAX_SOURCE + MAX_TARGET)), False),
}


def tiny_run(tmp_path, shared_data, name: str) -> Training:
    """The set-up run (model, optimizer, data) of a tiny model of family `name` on 45 DialogSum pairs."""
    preset, overrides, pack = FAMILIES[name]
    dialogsum = shared_data / "summarization" / "dialogsum"
    config = {
        "model": {"preset": preset, "d_model": 32, "n_heads": 4, "d_ff": 64, "dropout": 0.0, **overrides},
        "tokenizer": {"kind": "byte"},
        "data": {
            "format": "jsonl-pairs",
            "train": [str(dialogsum / "dialogsum.train.jsonl.gz")],
            "validation": [str(dialogsum / "dialogsum.dev.jsonl.gz")],
            "max_documents": 45,  # 12 batches an epoch, the last of one pair
        },
        "objective": {"kind": "seq2seq", "max_source_len": MAX_SOURCE, "max_target_len": MAX_TARGET, "pack": pack},
        "training": {"steps": STEPS, "batch_size": BATCH, "bucket_length": BUCKET, "seed": 3, "device": "cpu"},
        "output": {"plot": False, "tensorboard": False},
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    return set_up(load_config(tmp_path / "run.yaml"), RunDir(tmp_path / "run"), False, False, distributed.setup("cpu"))


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
        for parameter, gradient in compiled.items():  # within 1e-5 of the gradient's largest entry (or of 1)
            scale = max(1.0, eager[parameter].abs().max().item())
            torch.testing.assert_close(
                gradient, eager[parameter], rtol=0, atol=1e-5 * scale, msg=lambda m, p=parameter: f"{p}: {m}"
            )
    assert min(real_rows) < BATCH  # the epoch's last batch (or a packed one) ran among the full ones
    assert not torch._dynamo.utils.counters["graph_break"]
    assert len(shapes) <= (MAX_SOURCE // BUCKET) * (MAX_TARGET // BUCKET)  # rows padded to BATCH, lengths bucketed
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == len(shapes)  # one compile a shape, no more
