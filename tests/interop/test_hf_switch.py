"""Switch Transformers as Google released them (every other feed-forward sparse) and in other layouts load
exactly: random-weight checkpoints from transformers' SwitchTransformersConfig, saved with save_pretrained (no
download), give logits within 1e-4 of transformers on a padded batch, the same greedy and beam-4 tokens, an
export transformers reloads with the same logits, `encdec generate` and `encdec export` on the directory, train
(and fine-tune through training.init_from) with the router losses of the sparse layers alone, and take LoRA in
peft's module names; switch-base-8's config.json is counted as transformers builds it."""

import json
from pathlib import Path

import pytest
import torch

import encdec
from encdec.cli import main
from encdec.errors import CheckpointError, ConfigError
from encdec.interop import export_hf
from encdec.interop.hf_tokenizer import convert_tokenizer
from encdec.interop.switch import switch_model_config
from encdec.models.parameter_count import count_parameters_of
from encdec.modules import MoE
from encdec.tokenizers import build_tokenizer
from tests.interop.parity_kit import t5_batch as padded_batch
from tests.interop.parity_kit import t5_gap as logit_gap

transformers = pytest.importorskip("transformers")

SHAPE = dict(vocab_size=384, d_model=32, d_kv=8, d_ff=37, num_heads=4, num_experts=4, decoder_start_token_id=0)
LAYOUTS = {  # name -> SwitchTransformersConfig keys: which layers are sparse, the activation, the head
    "every-other": dict(num_layers=4, num_decoder_layers=4, num_sparse_encoder_layers=2, num_sparse_decoder_layers=2),
    "step-3-encoder-all-sparse-decoder-untied": dict(
        num_layers=6,
        num_decoder_layers=3,
        num_sparse_encoder_layers=2,  # a step of 6 // 2 = 3: layers 1 and 4
        num_sparse_decoder_layers=3,  # a step of 1: every layer
        dense_act_fn="gelu_new",
        tie_word_embeddings=False,
    ),
}
# switch-base-8's config.json as Google published it (google/switch-base-8), less the keys that do not size it
SWITCH_BASE_8 = dict(
    model_type="switch_transformers",
    architectures=["SwitchTransformersForConditionalGeneration"],
    d_model=768,
    d_ff=3072,
    d_kv=64,
    num_layers=12,
    num_decoder_layers=12,
    num_heads=12,
    num_experts=8,
    num_sparse_encoder_layers=6,  # a sparse step of 2
    num_sparse_decoder_layers=6,
    encoder_sparse_step=2,
    decoder_sparse_step=2,
    vocab_size=32128,
    expert_capacity=64,
    dense_act_fn="relu",
    router_jitter_noise=0.01,
    router_dtype="float32",
    router_bias=False,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
)
TEXTS = ["Grüße aus Köln", "once upon a time", "hello"]


def hf_switch(layout: str, **overrides):
    """A random-weight transformers Switch model; with tie_word_embeddings false, a head of its own over one
    token table the stacks share, as a checkpoint holds them (transformers 5 draws the stacks' tables apart)."""
    torch.manual_seed(0)
    config = transformers.SwitchTransformersConfig(**{**SHAPE, **LAYOUTS[layout], **overrides})
    model = transformers.SwitchTransformersForConditionalGeneration(config).eval()
    if config.tie_word_embeddings is False:
        model.encoder.embed_tokens = model.decoder.embed_tokens = model.shared
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * 0.05)
    return model


def saved(layout: str, path, **overrides):
    """A transformers Switch model of `layout` saved into `path` with a tokenizer.json beside it (encdec's byte
    tokenizer written for transformers): a complete directory."""
    reference = hf_switch(layout, **overrides)
    reference.save_pretrained(path)
    convert_tokenizer(build_tokenizer("byte")).save(path)
    return reference


def sparse(blocks) -> list[bool]:
    return [isinstance(block.ffn, MoE) for block in blocks]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_logits_equal_transformers_with_experts_in_the_same_layers(layout, tmp_path):
    reference = saved(layout, tmp_path)
    ours = encdec.load_hf(tmp_path)
    assert sparse(ours.encoder.blocks) == [block.is_sparse for block in reference.encoder.block]
    assert sparse(ours.decoder.blocks) == [block.is_sparse for block in reference.decoder.block]
    assert logit_gap(reference, ours) < 1e-4
    assert ours.config.embeddings.tie == ("untied" not in layout)


def test_the_released_layout_is_every_other_layer_from_the_second(tmp_path):
    saved("every-other", tmp_path)
    cfg = encdec.load_hf(tmp_path).config
    assert (cfg.experts.every, cfg.experts.decoder_every) == (2, None)
    assert [cfg.moe_layer(i) for i in range(4)] == [False, True, False, True]


@pytest.mark.parametrize("options", [{}, {"num_beams": 4}], ids=["greedy", "beam 4"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_generated_tokens_equal_transformers(layout, options, tmp_path):
    reference = saved(layout, tmp_path)
    ours = encdec.load_hf(tmp_path)
    src, mask, _ = padded_batch()
    expected = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=12, **options)
    assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=12, **options), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_export_reloads_in_transformers_with_the_same_logits_and_layout(layout, tmp_path):
    saved(layout, tmp_path / "in")
    ours = encdec.load_hf(tmp_path / "in")
    name = export_hf(ours, encdec.load_tokenizer(tmp_path / "in"), tmp_path / "out")
    assert name == "SwitchTransformersForConditionalGeneration"
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    assert logit_gap(reloaded, ours) < 1e-4
    written, read = (json.loads((tmp_path / d / "config.json").read_text()) for d in ("out", "in"))
    for key in ("num_sparse_encoder_layers", "num_sparse_decoder_layers", "dense_act_fn", "tie_word_embeddings"):
        assert written[key] == read[key], key
    again = encdec.load_hf(tmp_path / "out")
    assert again.config == ours.config
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())


def test_an_encdec_model_with_a_sparse_step_exports_as_transformers_builds_it(tmp_path):
    cfg = dict(vocab_size=384, n_experts=3, n_encoder_layers=4, n_decoder_layers=3, moe_every=2, decoder_moe_every=3)
    torch.manual_seed(0)
    ours = encdec.build_model(encdec.preset("t5-tiny", moe_activation="relu", dropout=0.0, **cfg)).eval()
    export_hf(ours, build_tokenizer("byte"), tmp_path)
    reloaded = transformers.SwitchTransformersForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert [block.is_sparse for block in reloaded.decoder.block] == [False, True, False]
    assert sparse(ours.decoder.blocks) == [False, True, False]
    src, mask, tgt = padded_batch()
    with torch.no_grad():
        expected = reloaded(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        assert (ours(src, tgt, src_mask=mask.bool()).logits - expected).abs().max() < 1e-4


def test_what_switch_cannot_express_is_one_sentence(tmp_path):
    tokenizer = build_tokenizer("byte")
    five = encdec.build_model(
        encdec.preset("t5-tiny", n_experts=2, moe_activation="relu", n_encoder_layers=5, moe_every=3)
    )
    with pytest.raises(ConfigError, match="a sparse step of 3 over 5 layers .* is no num_layers // num_sparse layout"):
        export_hf(five, tokenizer, tmp_path / "five")
    mixed = encdec.build_model(encdec.preset("t5-tiny", n_experts=2, moe_every=2))  # relu dense, gelu experts
    with pytest.raises(ConfigError, match="activation must equal experts.activation"):
        export_hf(mixed, tokenizer, tmp_path / "mixed")
    assert not (tmp_path / "five").exists() and not (tmp_path / "mixed").exists()


def test_past_expert_capacity_transformers_drops_tokens_and_encdec_does_not(tmp_path):
    """The documented difference: transformers passes a sequence's tokens past an expert's capacity through the
    residual alone, encdec routes every one, as transformers does with a capacity no sequence reaches."""
    reference = saved("every-other", tmp_path / "one", expert_capacity=1)
    ours = encdec.load_hf(tmp_path / "one")
    assert logit_gap(reference, ours) > 1e-2
    dropless = transformers.SwitchTransformersForConditionalGeneration.from_pretrained(
        tmp_path / "one", expert_capacity=10**6
    ).eval()
    assert logit_gap(dropless, ours) < 1e-4


def test_generate_and_export_on_the_command_line(tmp_path, capsys):
    reference = saved("every-other", tmp_path / "in")
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(TEXTS) + "\n")
    args = ["generate", str(tmp_path / "in"), "-i", str(inputs), "--format", "jsonl", "--max-new-tokens", "6"]
    assert main(args) == 0
    outputs = [json.loads(line)["output"] for line in capsys.readouterr().out.splitlines()]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "in")
    encoded = tokenizer(TEXTS, return_tensors="pt", padding=True)
    ids = reference.generate(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"], max_new_tokens=6)
    assert outputs == [text.strip() for text in tokenizer.batch_decode(ids[:, 1:], skip_special_tokens=True)]
    assert main(["export", str(tmp_path / "in"), "--out", str(tmp_path / "out")]) == 0
    assert "SwitchTransformersForConditionalGeneration" in capsys.readouterr().out
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    assert logit_gap(reloaded, encdec.load_hf(tmp_path / "in")) < 1e-4


def test_training_takes_the_router_losses_of_the_sparse_layers_alone(tmp_path):
    saved("step-3-encoder-all-sparse-decoder-untied", tmp_path)
    model = encdec.load_hf(tmp_path).train()
    src, mask, tgt = padded_batch()
    labels = tgt.roll(-1, dims=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(4):
        out = model(src, tgt, src_mask=mask, labels=labels)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    memory = model.encode(src, mask)
    assert len(memory.router_logits) == 2  # the encoder's layers 1 and 4
    assert len(model.decode(tgt, memory)[1]) == 3  # every decoder layer
    assert {"moe_aux_encoder", "moe_z_encoder", "moe_aux_decoder", "moe_z_decoder"} <= set(out.aux_losses)
    routers = [n for n, p in model.named_parameters() if n.endswith("router.weight") and p.grad is not None]
    assert len(routers) == 5 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]


def test_a_server_batch_of_switch_rows_each_at_its_own_position_equals_generate_alone(tmp_path):
    import threading

    from encdec.serving.scheduler import Scheduler

    saved("step-3-encoder-all-sparse-decoder-untied", tmp_path)
    model = encdec.load_hf(tmp_path)
    generator = torch.Generator().manual_seed(3)
    requests = [
        (torch.randint(3, SHAPE["vocab_size"], (1, length), generator=generator), options)
        for length, options in [(3, {"max_new_tokens": 4}), (20, {"max_new_tokens": 12}), (8, {"num_beams": 4})]
    ]
    alone = [encdec.generate(model, source, None, **{"max_new_tokens": 9, **options}) for source, options in requests]
    scheduler = Scheduler(model, max_rows=16)
    served = [None] * len(requests)

    def run(i):
        served[i] = scheduler.run(requests[i][0], None, {"max_new_tokens": 9, **requests[i][1]})

    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        scheduler.stop(timeout=30)
    assert all(torch.equal(s, a) for s, a in zip(served, alone, strict=True))


def test_a_run_fine_tuned_from_a_switch_directory_keeps_its_sparse_layers(tmp_path, shared_data):
    """training.init_from a Switch directory: the run trains its routers' losses and its checkpoints reopen with
    experts where the checkpoint had them."""
    from encdec.runs.load import load_run
    from encdec.training.metrics import read_metrics

    saved("every-other", tmp_path / "in")
    dialogsum = shared_data / "summarization" / "dialogsum"
    overrides = [
        f"training.init_from={tmp_path / 'in'}",
        "training.steps=2",
        "training.batch_size=4",
        "training.device=cpu",
        "evaluation.steps=1",
        "evaluation.generate=2",
        "evaluation.max_new_tokens=4",
        "data.max_documents=100",
        f"data.train=[{dialogsum / 'dialogsum.train.jsonl.gz'}]",
        f"data.validation=[{dialogsum / 'dialogsum.dev.jsonl.gz'}]",
        "objective.max_source_len=64",
        "objective.max_target_len=16",
    ]
    recipe = Path(__file__).parents[2] / "configs" / "recipes" / "dialogsum_t5_finetune.yaml"
    assert (
        main(["train", str(recipe), "--out", str(tmp_path / "run"), *(a for o in overrides for a in ("--set", o))]) == 0
    )
    model = load_run(tmp_path / "run", "latest").model
    assert (model.config.experts.every, sparse(model.encoder.blocks)) == (2, [False, True, False, True])
    steps = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"]
    assert len(steps) == 2 and all(
        r[f"moe_{k}_{s}"] > 0 for r in steps for k in ("aux", "z") for s in ("encoder", "decoder")
    )


def test_lora_with_peft_s_module_names_trains_and_merges_into_an_export(tmp_path):
    from encdec.models.lora import add_lora, merge_lora

    saved("every-other", tmp_path / "base")
    ours = encdec.load_hf(tmp_path / "base")
    adapted = add_lora(ours, r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q", "v", "wi", "wo"])
    experts = [n for n in adapted if ".experts." in n]
    assert len(experts) == 2 * 4 * 2 * 2  # wi and wo of 4 experts in 2 sparse layers of each stack
    for name, param in ours.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.1)
    src, mask, tgt = padded_batch()
    with torch.no_grad():
        adapted_logits = ours(src, tgt, src_mask=mask.bool()).logits
    merge_lora(ours)
    export_hf(ours, build_tokenizer("byte"), tmp_path / "merged")
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "merged").eval()
    with torch.no_grad():
        expected = reloaded(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    assert (adapted_logits - expected).abs().max() < 1e-4


def test_a_lora_adapter_with_peft_s_names_loads_in_peft_over_transformers_with_equal_logits(tmp_path):
    """peft has no default targets for Switch: its module names are transformers', q, v, wi and wo of the
    attention, the dense feed-forwards and every expert alike, as encdec's are."""
    from peft import PeftModel

    from encdec.interop.peft_adapter import save_peft_adapter
    from encdec.models.lora import add_lora, lora_layers

    saved("every-other", tmp_path / "base")
    ours = encdec.load_hf(tmp_path / "base")
    add_lora(ours, r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q", "v", "wi", "wo"])
    torch.manual_seed(2)
    for layer in lora_layers(ours).values():
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.1)
    written = save_peft_adapter(ours, tmp_path / "adapter", str(tmp_path / "base"))
    assert "encoder.block.1.layer.1.mlp.experts.expert_3.wi" in written and "encoder.block.0.layer.1.mlp.wo" in written
    base = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "base")
    assert logit_gap(PeftModel.from_pretrained(base, tmp_path / "adapter").eval(), ours.eval()) < 1e-4


def test_encdec_size_of_switch_base_8_s_config_json_is_transformers_parameter_count(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(SWITCH_BASE_8))
    assert main(["size", str(tmp_path / "config.json")]) == 0
    printed = capsys.readouterr().out
    keys = {k: v for k, v in SWITCH_BASE_8.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        built = transformers.SwitchTransformersForConditionalGeneration(transformers.SwitchTransformersConfig(**keys))
    expected = sum(p.numel() for p in built.parameters())
    assert f"parameters:                    {expected:,}\n" in printed and expected == 619_339_008
    assert count_parameters_of(switch_model_config(SWITCH_BASE_8)).total == expected
    (tmp_path / "config.json").write_text(json.dumps({**SWITCH_BASE_8, "router_bias": True}))
    assert main(["size", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert (
        error == f"encdec: error: {tmp_path / 'config.json'}: router_bias is set, which encdec's router does not have\n"
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"router_bias": True}, "router_bias is set, which encdec's router does not have"),
        ({"router_dtype": "bfloat16"}, "router_dtype is 'bfloat16', but encdec's router computes in float32"),
        ({"num_sparse_encoder_layers": 9}, "num_sparse_encoder_layers \\(9\\) exceeds the encoder's 4 layers"),
        ({"dense_act_fn": "tanh"}, "unsupported SwitchTransformers dense_act_fn 'tanh'"),
    ],
)
def test_a_config_json_encdec_cannot_compute_is_one_sentence(change, message, tmp_path):
    saved("every-other", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(CheckpointError, match=f"config.json: {message}"):
        encdec.load_hf(tmp_path)


def test_stacks_with_token_tables_of_their_own_are_refused(tmp_path):
    """transformers 5 builds an untied Switch model with three tables; encdec's stacks share one."""
    torch.manual_seed(0)
    config = transformers.SwitchTransformersConfig(**{**SHAPE, **LAYOUTS["every-other"]}, tie_word_embeddings=False)
    transformers.SwitchTransformersForConditionalGeneration(config).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="encoder.embed_tokens.weight differs from shared.weight"):
        encdec.load_hf(tmp_path)
