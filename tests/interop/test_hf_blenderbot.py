"""Blenderbot (model_type blenderbot, interop/blenderbot/): our model equals transformers' on the same tiny random
weights (logits on a padded batch, greedy and beam tokens), exports back to the same logits, is counted by
`encdec size` as transformers holds it, writes LoRA adapters peft loads under its names, and serves as it
generates (tests/interop/bart_family_kit.py's tests); read with learned positions from 0, pre-norm and no
embedding norm."""

import pytest

from tests.interop.bart_family_kit import BartFamilyTests

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


class TestBlenderbot(BartFamilyTests):
    family, start = "Blenderbot", 1

    def test_read_as_blenderbot_s_layout_with_its_ids(self, pair):
        cfg = pair[1].config
        layout = (cfg.positions.kind, cfg.positions.offset, cfg.norms.position, cfg.embeddings.norm)
        assert layout == ("learned", 0, "pre", False)
        assert (cfg.pad_id, cfg.eos_id, cfg.decoder_start_id) == (0, 2, 1)
