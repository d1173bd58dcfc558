"""FSMT (model_type fsmt, interop/fsmt/): our model equals transformers' on the same tiny random weights (logits on a
padded batch, greedy and beam tokens), exports back to the same logits, is counted by `encdec size` as transformers
holds it (its fixed sinusoids aside), writes LoRA adapters peft loads under its names, and serves as it generates
(tests/interop/bart_family_kit.py's tests); read as fairseq's post-norm Transformer with a source vocabulary of its
own; a tied checkpoint read as one table, position tables other than fairseq's refused; and its tokenizer's two
vocabularies, the source's encoding and the target's decoding, through `encdec generate` and the server."""

import pytest
import torch
from hf_kit import two_vocabulary_tokenizer

import encdec
from encdec.cli import main
from encdec.errors import CheckpointError
from encdec.interop.from_hf import hf_model_config
from encdec.models.parameter_count import count_parameters_of
from tests.interop import parity_kit
from tests.interop.bart_family_kit import BartFamilyTests

transformers = pytest.importorskip("transformers")
pytest.importorskip("sacremoses")  # FSMT's tokenizer runs Moses
pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is faster and steadier

SOURCE = 448  # src_vocab_size, above the target's: sources hold ids the decoder's table lacks
TEXTS = ["the cat sat", "a hat"]


def fsmt(path, **config):
    """A random-weight FSMT saved at `path`, every weight moved off its initial value, then its position tables
    fairseq's sinusoids again, as a checkpoint holds them: the model."""
    torch.manual_seed(0)
    model = transformers.FSMTForConditionalGeneration(
        transformers.FSMTConfig(langs=["en", "de"], **parity_kit.BART_SHAPE, **config)
    ).eval()
    parity_kit.saved_jittered(model, path, 0.05)
    with torch.no_grad():
        for table in (model.model.encoder.embed_positions, model.model.decoder.embed_positions):
            table.weight.copy_(table.get_embedding(*table.weight.shape, table.padding_idx))
    model.save_pretrained(path)
    return model


class TestFSMT(BartFamilyTests):
    family, start = "FSMT", 2  # the decoder starts at EOS
    forward = {"use_cache": False}  # with a cache transformers' forward takes the target as one step: no causal mask

    @pytest.fixture(scope="class")
    @classmethod
    def model_dir(cls, tmp_path_factory):
        path = tmp_path_factory.mktemp(cls.family)
        two_vocabulary_tokenizer(path, (SOURCE, cls.vocab))
        fsmt(path, src_vocab_size=SOURCE, tgt_vocab_size=cls.vocab)
        return path

    @pytest.fixture
    def batch(self):
        """Sources of the source vocabulary padded with FSMT's pad, 1 (transformers counts positions over the ids
        other than it), decoder inputs of the target's."""
        src, mask, _ = parity_kit.padded_rows(SOURCE, (12, 7, 3), 12, 9)
        return (
            src.masked_fill(mask == 0, 1),
            mask,
            parity_kit.padded_rows(self.vocab, (12, 7, 3), 12, 9, start=self.start)[2],
        )

    def test_size_counts_the_parameters_transformers_holds(self, pair, model_dir):
        """transformers holds fairseq's fixed sinusoids as weights (embed_positions), which encdec computes."""
        learned = sum(p.numel() for name, p in pair[0].named_parameters() if "embed_positions" not in name)
        assert count_parameters_of(hf_model_config(model_dir)).total == learned

    def test_read_as_fairseq_s_post_norm_transformer_of_two_vocabularies(self, pair, batch):
        cfg = pair[1].config
        layout = (
            cfg.positions.kind,
            cfg.positions.sinusoidal_layout,
            cfg.norms.position,
            cfg.embeddings.norm,
            cfg.output.logits_bias,
        )
        assert layout == ("sinusoidal", "fairseq", "post", False, False) and cfg.embeddings.scale
        assert (cfg.source_vocab_size, cfg.vocab_size, cfg.embeddings.shared, cfg.embeddings.tie) == (SOURCE, 384, 0, 0)
        assert (cfg.pad_id, cfg.eos_id, cfg.decoder_start_id) == (1, 2, 2) and batch[0].max() >= self.vocab

    def test_the_command_line_and_the_server_encode_by_the_source_table_and_decode_by_the_target_one(
        self, pair, model_dir, tmp_path, capsys
    ):
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
        encoded = tokenizer(TEXTS, return_tensors="pt", padding=True)
        ids = pair[0].generate(**encoded, max_new_tokens=6)
        expected = [text.strip() for text in tokenizer.batch_decode(ids[:, 1:], skip_special_tokens=True)]
        (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
        assert main(["export", str(model_dir), "--out", str(tmp_path / "out")]) == 0  # its tokenizer's files too
        for directory in (model_dir, tmp_path / "out"):
            capsys.readouterr()
            assert main(["generate", str(directory), "-i", str(tmp_path / "in.txt"), "--max-new-tokens", "6"]) == 0
            assert capsys.readouterr().out.splitlines() == expected and all(expected)
        pytest.importorskip("fastapi")
        pytest.importorskip("uvicorn")
        from serving.server_kit import Served, call  # tests/serving's: a real `encdec serve` process

        server = Served(model_dir)
        try:
            status, answer, _ = call(
                server.url + "/generate", {"inputs": TEXTS[0], "parameters": {"max_new_tokens": 6}}
            )
        finally:
            server.stop()
        assert status == 200 and answer["generated_text"] == expected[0], expected


def test_a_tied_checkpoint_reads_as_one_table_and_trained_positions_are_refused(tmp_path):
    """tie_word_embeddings: one vocabulary in one table the encoder, the decoder and the head read, which
    transformers saves once (the decoder's); a checkpoint whose stored positions are not fairseq's is refused."""
    reference = fsmt(tmp_path, src_vocab_size=384, tgt_vocab_size=384, tie_word_embeddings=True)
    ours = encdec.load_hf(tmp_path)
    assert ours.config.embeddings.shared and ours.config.embeddings.tie and ours.config.source_vocab_size == 384
    src, mask, tgt = parity_kit.padded_rows(384, (12, 7, 3), 12, 9, start=2)
    assert parity_kit.logit_gap(reference, ours, (src.masked_fill(mask == 0, 1), mask, tgt), **TestFSMT.forward) < 1e-4
    learned = sum(p.numel() for name, p in reference.named_parameters() if "embed_positions" not in name)
    assert count_parameters_of(hf_model_config(tmp_path)).total == learned
    parity_kit.saved_jittered(reference, tmp_path, 0.05)  # its position tables moved too
    with pytest.raises(CheckpointError, match=r"model.encoder.embed_positions.weight is not fairseq's sinusoidal"):
        encdec.load_hf(tmp_path)
