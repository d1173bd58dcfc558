"""`encdec.attention_maps(MODEL, source, target)`: a run read as `encdec generate` reads it, the target given
(encoded as evaluate encodes a reference) or the model's greedy output, the maps those of the pass."""

from pathlib import Path

import numpy as np
import pytest
import torch

import encdec
from encdec.errors import DataError
from encdec.inspection import attention_maps, record_attention, save_maps
from encdec.runs.open import open_model

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoint_2ba69c1" / "run"  # a byte-level T5, en->de
TEMPLATE = "translate English to German: "  # the run's source template

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def opened():
    return open_model(RUN)


def test_a_given_target_is_read_as_the_run_wrote_its_targets(opened):
    maps = attention_maps(opened, "A dog runs.", target="Ein Hund.")
    assert maps.source_tokens == list(TEMPLATE + "A dog runs.")
    assert maps.target_tokens == [*"Ein Hund.", "</s>"]
    layers, heads = opened.model.config.decoder_layers, opened.model.config.n_heads
    assert maps.cross.shape == (layers, heads, 10, len(maps.source_tokens))
    assert maps.encoder.shape == (opened.model.config.n_encoder_layers, heads, 40, 40)
    assert not maps.generated


def test_the_maps_are_those_of_the_tensors_they_came_from(opened):
    maps = attention_maps(opened, "A dog runs.", target="Ein Hund.")
    tokenizer = opened.run.tokenizer
    src = torch.tensor([tokenizer.encode(TEMPLATE + "A dog runs.")])
    tgt = torch.tensor([tokenizer.encode("Ein Hund.", add_eos=True)])
    record = record_attention(opened.model, src, tgt)
    assert torch.equal(maps.cross, record.cross[0]) and torch.equal(maps.encoder, record.encoder[0])


def test_without_a_target_the_greedy_output_is_drawn(opened):
    maps = attention_maps(opened, "A man sleeps.", max_new_tokens=12)
    encoded = opened.text(["A man sleeps."])
    ids = encdec.generate(opened.model, encoded["input_ids"], encoded["attention_mask"], max_new_tokens=12)
    assert maps.generated
    assert maps.target_tokens == opened.run.tokenizer.decode([[i] for i in ids[0, 1:].tolist()], skip_special=False)
    assert maps.cross.shape[2] == len(maps.target_tokens) <= 12


def test_the_source_is_cut_as_generate_cuts_it():
    maps = attention_maps(RUN, "word " * 100, target="x", max_source_len=16)
    assert len(maps.source_tokens) == 16 == maps.encoder.shape[-1]


@pytest.mark.parametrize(("source", "target"), [("  ", None), ("A dog.", "\n")])
def test_an_empty_source_or_target_is_one_sentence(opened, source, target):
    with pytest.raises(DataError, match="is empty"):
        attention_maps(opened, source, target)


def test_the_numbers_are_saved_as_npz(opened, tmp_path):
    maps = attention_maps(opened, "A dog runs.", target="Ein Hund.")
    path = save_maps(maps, tmp_path / "maps.npz")
    with np.load(path) as saved:
        assert np.array_equal(saved["cross"], maps.cross.numpy())
        assert np.array_equal(saved["encoder"], maps.encoder.numpy())
        assert saved["source_tokens"].tolist() == maps.source_tokens
        assert saved["target_tokens"].tolist() == maps.target_tokens
        assert not saved["generated"]
