"""The tests every Hugging Face family of BART's layout read in one folder (Blenderbot, PLBart) passes against
transformers on a tiny random checkpoint: logits on a padded batch (right and left padding), greedy and beam
tokens, an export transformers reloads as the same class with the same logits, `encdec size` counting what
transformers holds, LoRA under peft's names, and served rows equal to generate alone.

A family's test module subclasses BartFamilyTests as Test<Family>, naming the family as transformers' classes do
and the id its decoder starts from."""

import pytest
import torch

import encdec
from encdec.interop import export_hf
from encdec.interop.from_hf import hf_model_config
from encdec.models.parameter_count import count_parameters_of
from encdec.tokenizers import build_tokenizer
from tests.interop import parity_kit
from tests.interop.serving_kit import assert_served_equals_generate_alone, mixed

transformers = pytest.importorskip("transformers")


class BartFamilyTests:
    """A family's tests over three fixtures: `model_dir` (a random-weight <family>ForConditionalGeneration in
    BART_SHAPE, every weight moved off its initial value, saved), `pair` (transformers' model read back from it, and
    ours) and `batch` ((3, 12) ids with rows of 12, 7 and 3 real tokens, their mask, and (3, 9) decoder inputs from
    the start)."""

    family: str  # as transformers' classes name it: <family>Config, <family>ForConditionalGeneration
    start: int  # the decoder's start id
    vocab = 384
    config: dict = {}  # <family>Config's keys beside BART_SHAPE's (LED's window and position tables)
    cross, ffn = "encoder_attn", ""  # the decoder's cross-attention as transformers names it; its feed-forward's prefix
    lora_modules = 2 * 8 + 5  # q and v of 8 attentions, wo of 5 feed-forwards
    prefix = "model."  # what transformers' modules are named under (LEDForConditionalGeneration: led.)
    encoder_q = "encoder.layers.0.self_attn.q_proj"  # our encoder's first query projection, as transformers names it
    forward: dict = {}  # transformers' forward's options where its defaults compute other logits (FSMT's: no cache)

    @pytest.fixture(scope="class")
    @classmethod
    def model_dir(cls, tmp_path_factory):
        path = tmp_path_factory.mktemp(cls.family)
        torch.manual_seed(0)
        config = getattr(transformers, f"{cls.family}Config")(
            vocab_size=cls.vocab, **parity_kit.BART_SHAPE | cls.config
        )
        model = getattr(transformers, f"{cls.family}ForConditionalGeneration")(config).eval()
        parity_kit.saved_jittered(model, path, 0.05)
        return path

    @pytest.fixture(scope="class")
    @classmethod
    def pair(cls, model_dir):
        return transformers.AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval(), encdec.load_hf(model_dir)

    @pytest.fixture
    def batch(self):
        return parity_kit.padded_rows(self.vocab, (12, 7, 3), 12, 9, start=self.start)

    @pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
    def test_logits_equal_transformers_on_a_padded_batch(self, pair, batch, left):
        assert parity_kit.logit_gap(*pair, batch, left, **self.forward) < 1e-4

    @pytest.mark.parametrize("options", [dict(), dict(num_beams=4, num_return_sequences=2)], ids=["greedy", "beam"])
    def test_generated_tokens_equal_transformers_generate(self, pair, batch, options):
        reference, ours = pair
        src, mask, _ = batch
        expected = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=8, **options)
        assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=8, **options), expected)

    def test_an_export_reloads_in_transformers_with_the_same_logits(self, pair, batch, tmp_path):
        reference, ours = pair
        hf_class = type(reference).__name__
        assert export_hf(ours, build_tokenizer("byte"), tmp_path / "out") == hf_class
        reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
        assert type(reloaded).__name__ == hf_class
        assert parity_kit.logit_gap(reloaded, ours, batch, **self.forward) < 1e-4
        assert encdec.load_hf(tmp_path / "out").config == ours.config

    def test_size_counts_the_parameters_transformers_holds(self, pair, model_dir):
        reference = pair[0]
        assert count_parameters_of(hf_model_config(model_dir)).total == sum(p.numel() for p in reference.parameters())

    def test_lora_with_peft_s_names_exports_an_adapter_peft_loads_with_equal_logits(self, model_dir, batch, tmp_path):
        from peft import PeftModel

        from encdec.interop.peft_adapter import hf_module_names, save_peft_adapter
        from encdec.models.lora import add_lora, lora_layers

        ours = encdec.load_hf(model_dir)
        names = hf_module_names(ours)
        assert names["encoder.blocks.0.self_attn.q"] == self.prefix + self.encoder_q
        assert names["decoder.blocks.2.cross_attn.o"] == f"{self.prefix}decoder.layers.2.{self.cross}.out_proj"
        added = add_lora(ours, r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q", "v", "wo"])
        assert len(added) == self.lora_modules
        torch.manual_seed(2)
        for layer in lora_layers(ours).values():
            torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.1)
        targets = save_peft_adapter(ours, tmp_path / "adapter", str(model_dir))
        assert f"{self.prefix}decoder.layers.0.{self.ffn}fc2" in targets
        base = transformers.AutoModelForSeq2SeqLM.from_pretrained(model_dir)
        adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
        assert parity_kit.logit_gap(adapted, ours.eval(), batch, **self.forward) < 1e-4

    def test_a_server_batch_of_rows_each_at_its_own_position_equals_generate_alone(self, pair):
        ours = pair[1]
        assert_served_equals_generate_alone(ours, (3, self.vocab), mixed(12))
