"""An encoder of its own vocabulary (model.encoder.vocab_size: FSMT's source vocabulary beside its target one): a
token table of that size read by the encoder alone, counted, its ids accepted as sources up to its size and no
further; a shared table or a Hugging Face layout without one refused in one sentence."""

import pytest
import torch

import encdec
from encdec.errors import ConfigError, DataError
from encdec.interop.to_hf import LOAD_HINT, hf_layout
from encdec.models import ModelConfig, build_model, preset
from encdec.models.parameter_count import count_parameters_of

SOURCE, TARGET = 70, 40  # the source vocabulary larger than the target's: ids 40..69 are sources' alone


def model(**overrides):
    cfg = preset("transformer-tiny", vocab_size=TARGET, shared_embeddings=False, encoder={"vocab_size": SOURCE})
    return build_model(ModelConfig.from_dict(cfg.to_dict() | overrides)).eval()


def test_the_encoder_reads_a_table_of_its_own_size_which_is_counted():
    ours = model()
    assert ours.encoder.embed.weight.shape == (SOURCE, ours.config.d_model) and ours.config.source_vocab_size == SOURCE
    assert ours.embed.weight.shape[0] == TARGET  # the decoder's, which the head predicts over
    assert count_parameters_of(ours.config).total == sum(p.numel() for p in ours.parameters())
    assert ModelConfig().source_vocab_size == ModelConfig().vocab_size  # unset: the decoder's


def test_sources_in_the_encoder_s_vocabulary_are_read_and_outputs_in_the_decoder_s():
    ours = model()
    src = torch.tensor([[TARGET + 5, SOURCE - 1, 7, 2]])  # ids the decoder's table has no row for
    logits = ours(src, torch.tensor([[0, 5, 6]])).logits
    assert logits.shape == (1, 3, TARGET)
    assert encdec.generate(ours, src, max_new_tokens=3).max() < TARGET
    with pytest.raises(DataError, match=rf"^input token ids must lie in \[0, {SOURCE}\); got 2\.\.{SOURCE}$"):
        encdec.generate(ours, torch.tensor([[SOURCE, 2]]), max_new_tokens=3)


def test_a_shared_table_of_another_size_or_a_source_id_beyond_it_is_refused_in_one_sentence():
    with pytest.raises(ConfigError) as refused:
        ModelConfig(vocab_size=TARGET, encoder={"vocab_size": SOURCE})
    assert str(refused.value) == (
        f"an encoder of {SOURCE} tokens (model.encoder.vocab_size) cannot read the decoder's token table of "
        f"{TARGET}; set model.embeddings.shared false"
    )
    with pytest.raises(
        ConfigError, match=r"^model.eos_id must be below model.encoder.vocab_size \(8\), got 9: sources"
    ):
        ModelConfig.from_dict(
            dict(vocab_size=TARGET, eos_id=9, decoder_start_id=30, shared_embeddings=False, encoder={"vocab_size": 8})
        )
    assert ModelConfig.from_dict(
        dict(vocab_size=TARGET, decoder_start_id=30, shared_embeddings=False, encoder={"vocab_size": 8})
    )


def test_a_layout_without_a_source_vocabulary_refuses_the_export():
    cfg = preset("t5-tiny", vocab_size=TARGET, shared_embeddings=False, encoder={"vocab_size": SOURCE})
    with pytest.raises(
        ConfigError, match=r"^an encoder of its own vocabulary \(model.encoder.vocab_size\) has no "
    ) as e:
        hf_layout(cfg)
    assert str(e.value).endswith(LOAD_HINT) and "\n" not in str(e.value)
