"""LED (model_type led, interop/led/): our model equals transformers' on the same tiny random weights (logits on a
padded batch whose width is no multiple of the attention window, greedy and beam tokens), exports back as LED with
the same logits, is counted by `encdec size` as transformers holds it (an encoder's position table larger than the
decoder's), writes LoRA adapters peft loads under its names, and serves as it generates
(tests/interop/bart_family_kit.py's tests); with model.attention.global_tokens first its logits are transformers' given
each row's first token as the global_attention_mask; unequal windows are refused in one sentence."""

import shutil

import pytest
import torch

import encdec
from encdec.interop.families import FAMILIES
from tests.interop import parity_kit
from tests.interop.bart_family_kit import BartFamilyTests

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

# a window of 8, 4 keys each side: the batch's 12 tokens padded to 16 by transformers, its rows of 7 and 3 within
LED_SHAPE = dict(attention_window=8, max_encoder_position_embeddings=48, max_decoder_position_embeddings=24)


class TestLED(BartFamilyTests):
    family, start, config = "LED", 2, LED_SHAPE
    prefix, encoder_q = "led.", "encoder.layers.0.self_attn.longformer_self_attn.query"

    def test_read_with_a_band_of_half_the_window_and_each_stack_s_table(self, pair):
        cfg = pair[1].config
        assert (cfg.attention.encoder, cfg.attention.local_radius, cfg.attention.global_tokens) == (
            "local_global",
            4,
            "none",
        )
        assert (cfg.encoder.max_positions, cfg.positions.max, cfg.positions.offset) == (48, 24, 0)

    def test_an_input_longer_than_the_decoder_s_table_is_read_by_the_encoder_s(self, pair):
        batch = parity_kit.padded_rows(self.vocab, (40, 29), 40, 9, start=self.start)  # 24 decoder rows, 48 encoder
        assert parity_kit.logit_gap(*pair, batch) < 1e-4
        src, mask, _ = batch
        expected = pair[0].generate(input_ids=src, attention_mask=mask, max_new_tokens=8)
        assert torch.equal(encdec.generate(pair[1], src, mask, max_new_tokens=8), expected)

    def test_with_the_first_token_global_its_logits_equal_transformers_given_that_mask(self, model_dir, pair, batch):
        reference = pair[0]
        ours = encdec.load_hf(model_dir)
        ours.config.attention.global_tokens = "first"
        first = encdec.build_model(ours.config)
        first.load_state_dict(ours.state_dict())
        src, mask, tgt = batch
        chosen = torch.zeros_like(mask)
        chosen[:, 0] = 1
        with torch.no_grad():
            expected = reference(
                input_ids=src, attention_mask=mask, global_attention_mask=chosen, decoder_input_ids=tgt
            )
            got = first.eval()(src, tgt, src_mask=mask.bool()).logits
        assert (got - expected.logits).abs().max().item() < 1e-4
        assert parity_kit.logit_gap(reference, first, batch) > 1e-3  # not transformers' without global tokens
        assert "global_attention_mask" in FAMILIES["led"].note(first.config)

    def test_unequal_windows_are_refused_in_one_sentence(self, model_dir, tmp_path):
        shutil.copytree(model_dir, tmp_path / "led")
        parity_kit.assert_refused_in_one_sentence(
            tmp_path / "led", {"attention_window": [8, 4]}, r"^attention_window differs between layers \(\[4, 8\]\)"
        )
