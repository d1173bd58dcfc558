"""NLLB-MoE (model_type nllb-moe, interop/nllb_moe/): our model equals transformers' on the same tiny random weights
(logits on a padded batch, greedy and beam tokens), exports back as NLLB-MoE with the same logits, is counted by
`encdec size` as transformers holds it, writes LoRA adapters peft loads under its names (experts included), and
serves as it generates (tests/interop/bart_family_kit.py's tests); read as M2M100's layout with top-2 experts in
the last layer of each step; and with a capacity that drops tokens, logits and generation still equal transformers'.

transformers 5's NllbMoeExperts.forward one-hot encodes the router's (N, E) mask a second time, and so runs experts
0 and 1 alone, on the wrong tokens; the reference here combines the experts as the router weighs them, as
transformers 4's NllbMoeSparseMLP did (`experts_as_routed`)."""

import json
import shutil

import pytest
import torch

import encdec
from encdec.modules import MoE
from tests.interop import parity_kit
from tests.interop.bart_family_kit import BartFamilyTests

transformers = pytest.importorskip("transformers")
nllb_moe = pytest.importorskip("transformers.models.nllb_moe.modeling_nllb_moe")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


def experts_as_routed(self, hidden_states, router_mask, router_probs):
    """Each expert on the tokens it has a weight for, times that weight (and 1 - moe_token_dropout in evaluation)."""
    out = torch.zeros_like(hidden_states)
    for e in range(self.num_experts):
        rows = router_probs[:, e] > 0
        y = self[f"expert_{e}"](hidden_states[rows]) * router_probs[rows, e, None]
        if self.moe_token_dropout > 0:
            y = self.token_dropout(y) if self.training else y * (1 - self.moe_token_dropout)
        out[rows] += y
    return out


@pytest.fixture(scope="module", autouse=True)
def routed_as_transformers_4():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nllb_moe.NllbMoeExperts, "forward", experts_as_routed)
        yield


class TestNllbMoe(BartFamilyTests):
    family, start = "NllbMoe", 2
    config = {"num_experts": 4, "encoder_sparse_step": 2, "decoder_sparse_step": 2}
    cross, ffn = "cross_attention", "ffn."
    lora_modules = 2 * 8 + 3 + 2 * 4  # q and v of 8 attentions, wo of 3 dense feed-forwards and of 2 layers' experts

    def test_read_as_m2m100_s_layout_with_top_2_experts_in_the_last_layer_of_each_step(self, pair):
        ours = pair[1]
        cfg, experts = ours.config, ours.config.experts
        assert (cfg.positions.kind, cfg.positions.sinusoidal_layout, cfg.norms.position) == (
            "sinusoidal",
            "fairseq",
            "pre",
        )
        assert (experts.count, experts.top_k, experts.renormalize, experts.capacity) == (4, 2, True, 64)
        assert (experts.eval_capacity_fraction, experts.token_dropout, experts.route_padding) == (1.0, 0.2, False)
        assert [isinstance(block.ffn, MoE) for block in ours.decoder.blocks] == [False, True, False]

    def test_a_capacity_that_drops_tokens_computes_transformers_logits_and_tokens(
        self, pair, model_dir, batch, tmp_path
    ):
        config = json.loads((model_dir / "config.json").read_text())
        shutil.copytree(model_dir, tmp_path, dirs_exist_ok=True)
        dropping = {"moe_eval_capacity_token_fraction": 0.3, "batch_prioritized_routing": True}
        (tmp_path / "config.json").write_text(json.dumps(config | dropping))
        reference, ours = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval(), encdec.load_hf(tmp_path)
        assert parity_kit.logit_gap(reference, ours, batch) < 1e-4 < parity_kit.logit_gap(pair[0], ours, batch)
        src, mask, _ = batch
        for options in (dict(), dict(num_beams=4, num_return_sequences=2)):
            expected = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=8, **options)
            assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=8, **options), expected)

    def test_the_training_loss_is_transformers_with_its_load_balance(self, model_dir, batch, tmp_path):
        """In training (dropout and layer drop off): cross-entropy plus router_aux_loss_coef times each stack's load
        balance over both choices of the real tokens, and no z-loss."""
        config = json.loads((model_dir / "config.json").read_text()) | {"router_aux_loss_coef": 0.5}
        off = ("dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop")
        shutil.copytree(model_dir, tmp_path, dirs_exist_ok=True)
        (tmp_path / "config.json").write_text(json.dumps(config | dict.fromkeys((*off, "moe_token_dropout"), 0.0)))
        reference, ours = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path), encdec.load_hf(tmp_path)
        src, mask, tgt = batch
        labels = tgt.roll(-1, dims=1).masked_fill(tgt == 0, -100)
        expected = reference.train()(
            input_ids=src, attention_mask=mask, decoder_input_ids=tgt, labels=labels, output_router_logits=True
        )
        got = ours.train()(src, tgt, src_mask=mask.bool(), labels=labels)
        torch.testing.assert_close(got.aux_losses["moe_aux_encoder"], expected.encoder_aux_loss)
        torch.testing.assert_close(got.aux_losses["moe_aux_decoder"], expected.decoder_aux_loss)
        torch.testing.assert_close(got.loss, expected.loss)

    @pytest.mark.parametrize(
        "changed,message",
        [
            ({"decoder_sparse_step": 0}, "decoder_sparse_step 0 leaves the decoder without experts where the other"),
            ({"expert_capacity": None}, "expert_capacity is null"),
            ({"router_dtype": "bfloat16"}, "router_bias and router_dtype must be false and float32"),
        ],
    )
    def test_what_encdec_s_experts_cannot_express_is_refused_in_one_sentence(
        self, model_dir, tmp_path, changed, message
    ):
        shutil.copytree(model_dir, tmp_path, dirs_exist_ok=True)
        parity_kit.assert_refused_in_one_sentence(tmp_path, changed, message)


def test_size_of_transformers_default_config_json_is_its_parameter_count(tmp_path, capsys):
    """NllbMoeConfig's defaults (facebook/nllb-moe-54b's style: 128 experts in every fourth layer), counted from
    config.json alone as transformers holds the model (its sinusoids are no parameter)."""
    from encdec.cli import main

    config = transformers.NllbMoeConfig()
    (tmp_path / "config.json").write_text(config.to_json_string())
    assert main(["size", str(tmp_path / "config.json")]) == 0
    with torch.device("meta"):
        expected = sum(p.numel() for p in transformers.NllbMoeForConditionalGeneration(config).parameters())
    assert f"parameters:                    {expected:,}\n" in capsys.readouterr().out
