"""MVP (model_type mvp, interop/mvp/), use_prompt false as its released checkpoints: our model equals transformers'
on the same tiny random weights (logits on a padded batch, greedy and beam tokens), exports back as MVP with the
same logits, is counted by `encdec size` as transformers holds it, writes LoRA adapters peft loads under its names,
and serves as it generates (tests/interop/bart_family_kit.py's tests); read as BART's layout, named MVP; with
use_prompt true it is refused in one sentence."""

import shutil

import pytest

from tests.interop import parity_kit
from tests.interop.bart_family_kit import BartFamilyTests

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier


class TestMvp(BartFamilyTests):
    family, start = "Mvp", 2

    def test_read_as_bart_s_layout_named_mvp_with_its_ids(self, pair):
        cfg = pair[1].config
        layout = (
            cfg.positions.kind,
            cfg.positions.offset,
            cfg.norms.position,
            cfg.embeddings.norm,
            cfg.embeddings.scale,
        )
        assert layout == ("learned", 2, "post", True, False) and cfg.hf_model_type == "mvp"
        assert (cfg.pad_id, cfg.eos_id, cfg.decoder_start_id) == (1, 2, 2)

    def test_prompts_are_refused_in_one_sentence(self, model_dir, tmp_path):
        shutil.copytree(model_dir, tmp_path / "prompted")
        parity_kit.assert_refused_in_one_sentence(tmp_path / "prompted", {"use_prompt": True}, "^use_prompt is set")
