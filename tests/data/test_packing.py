"""objective.pack: a step's examples laid out several to a row, each once, whole and in order."""

import numpy as np
import pytest
import torch
from objective_helpers import SUMMARIZATION, seq2seq

from encdec.data.batch import IGNORE_INDEX, collate_encoder_decoder
from encdec.data.corpora import iter_jsonl_pairs
from encdec.data.documents import Documents
from encdec.data.objectives import PairTemplate, UL2Objective, build_objective, tokenize_pairs
from encdec.data.objectives.packing import collate_packed, first_fit
from encdec.errors import ConfigError
from encdec.tokenizers import build_tokenizer

START = 0


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("byte", extra_specials=("[R]", "[X]", "[S]"))


def random_examples(n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (rng.integers(3, 250, rng.integers(1, 40)), np.append(rng.integers(3, 250, rng.integers(0, 15)), 1))
        for _ in range(n)
    ]


def unpack(batch) -> list[tuple[list[int], list[int], list[int]]]:
    """(source, labels, decoder input) of every (row, segment), row by row."""
    out = []
    for b in range(batch.src_ids.shape[0]):
        for s in range(1, int(batch.src_segments[b].max()) + 1):
            src, tgt = batch.src_segments[b] == s, batch.tgt_segments[b] == s
            out.append((batch.src_ids[b][src].tolist(), batch.labels[b][tgt].tolist(), batch.tgt_ids[b][tgt].tolist()))
    return out


def examples_of(batch) -> list[tuple[list[int], list[int]]]:
    """(source, labels) of every row of an unpacked batch."""
    return [
        (batch.src_ids[i][batch.src_mask[i]].tolist(), batch.labels[i][batch.labels[i] != IGNORE_INDEX].tolist())
        for i in range(batch.batch_size)
    ]


def check_layout(batch) -> None:
    """Segments are contiguous from 1, positions count from 0 in each, padding is segment 0 and unlabelled."""
    for segments, positions in ((batch.src_segments, batch.src_positions), (batch.tgt_segments, batch.tgt_positions)):
        for seg, pos in zip(segments, positions, strict=True):
            real = seg[seg > 0]
            assert (seg[: len(real)] == real).all() and (real.diff() >= 0).all() and (real.diff() <= 1).all()
            assert real[0] == 1
            starts = torch.cat([torch.tensor([True]), real.diff() == 1])
            expected = torch.arange(len(real)) - torch.cummax(torch.where(starts, torch.arange(len(real)), 0), 0)[0]
            assert torch.equal(pos[: len(real)], expected)
    assert torch.equal(batch.src_mask, batch.src_segments > 0)
    assert ((batch.labels == IGNORE_INDEX) == (batch.tgt_segments == 0)).all()


@pytest.mark.parametrize("seed", range(3))
def test_every_example_appears_once_whole_and_in_order_in_fewer_rows(seed):
    examples = random_examples(40, seed)
    batch = collate_packed(examples, pad_id=0, decoder_start_id=START, max_source_len=64, max_target_len=24)
    check_layout(batch)
    assert batch.src_ids.shape[1] <= 64 and batch.tgt_ids.shape[1] <= 24
    unpacked = collate_encoder_decoder(examples, pad_id=0, decoder_start_id=START)
    assert batch.src_ids.shape[0] < unpacked.src_ids.shape[0] / 2
    assert batch.src_ids.numel() < unpacked.src_ids.numel()
    order = [i for row in first_fit([(len(s), len(t)) for s, t in examples], 64, 24) for i in row]
    assert sorted(order) == list(range(len(examples)))
    for i, (src, labels, decoder_input) in zip(order, unpack(batch), strict=True):
        assert src == examples[i][0].tolist() and labels == examples[i][1].tolist()
        assert decoder_input == [START, *labels[:-1]]  # shifted right inside the example, never across
    assert batch.num_tokens == unpacked.num_tokens


def test_first_fit_places_the_longest_first_in_the_earliest_row_and_gives_an_oversized_example_its_own_row():
    lengths = [(5, 2), (6, 2), (1, 3), (9, 1), (20, 1), (1, 1)]
    assert first_fit(lengths, 10, 4) == [[4], [3, 2], [1, 5], [0]]  # 20 alone; 9, 6 and 5 open rows in turn


def test_an_unpacked_batch_has_no_layout_and_no_packing_arguments():
    batch = collate_encoder_decoder(random_examples(4), pad_id=0, decoder_start_id=START)
    assert batch.src_segments is None and batch.packing == {}


def test_packed_dialogsum_steps_hold_the_same_examples_in_fewer_padded_positions(shared_data, tok):
    pairs = list(iter_jsonl_pairs(shared_data / "summarization" / "dialogsum" / "dialogsum.dev.jsonl.gz"))[:96]
    sources, targets = tokenize_pairs(tok, pairs, PairTemplate(*SUMMARIZATION))
    packed = seq2seq(
        sources, targets, 16, tok, max_source_len=2048, max_target_len=512, pack=True, seed=5
    )  # bytes: ~2 dialogues a row
    for step, indices in enumerate(packed.plan.batches(packed.seed, 0)[:3]):
        a = collate_encoder_decoder(
            [packed.example(int(packed.indices[i])) for i in indices], tok.pad_id, tok.decoder_start_id
        )  # the same examples, one to a row
        b = packed.next_batch()
        check_layout(b)
        assert sorted(examples_of(a)) == sorted((s, t) for s, t, _ in unpack(b))
        assert b.src_ids.numel() + b.tgt_ids.numel() < 0.8 * (a.src_ids.numel() + a.tgt_ids.numel())
    assert packed.position == (0, 3)


@pytest.mark.parametrize("kind", ["ul2", "span_corruption"])
def test_ul2_packs_its_denoised_examples_with_their_modes(kind, tok, tinystories_stories):
    docs = Documents.from_lists(tok.encode(tinystories_stories[:200], add_eos=True))
    options = dict(seq_len=2048, mode_tokens=kind == "ul2")  # a chunk holds a whole story (bytes)
    plain = build_objective(kind, docs, tok, 16, seed=2, **options)
    packed = build_objective(kind, docs, tok, 16, seed=2, pack=True, **options)
    assert isinstance(packed, UL2Objective)
    a, b = plain.next_batch(), packed.next_batch()
    check_layout(b)
    assert b.modes == a.modes and a.num_tokens == b.num_tokens
    assert sorted(examples_of(a)) == sorted((s, t) for s, t, _ in unpack(b))
    assert b.batch_size < a.batch_size


@pytest.mark.parametrize("kind", ["causal_lm", "prefix_lm"])
def test_pack_is_refused_for_objectives_without_an_encoder(kind, tok):
    docs = Documents.from_lists([[5, 6, 7, 8] * 10])
    with pytest.raises(ConfigError, match="objective.pack works with"):
        build_objective(kind, docs, tok, 2, pack=True)
