import json

import numpy as np
import pytest
import torch
from objective_helpers import SUMMARIZATION, rebuild_from_corruption, seq2seq
from work_kit import counted_calls

from encdec.data.batch import IGNORE_INDEX
from encdec.data.corpora import iter_jsonl_pairs
from encdec.data.documents import Documents
from encdec.data.objectives import (
    CausalLMObjective,
    PairTemplate,
    Seq2SeqObjective,
    UL2Config,
    UL2Objective,
    collate_prefix_lm,
    prefix_lm_objective,
    tokenize_pairs,
    ul2_mode_ids,
)
from encdec.errors import ConfigError
from encdec.tokenizers import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("byte", extra_specials=("[R]", "[X]", "[S]"))


@pytest.fixture(scope="module")
def docs(tok, tinystories_stories):
    return Documents.from_lists(tok.encode(tinystories_stories[:200], add_eos=True))


def ul2(docs, tok, **kwargs):
    options = dict(
        batch_size=8,
        pad_id=tok.pad_id,
        eos_id=tok.eos_id,
        decoder_start_id=tok.decoder_start_id,
        sentinel_ids=tok.sentinel_ids,
        seed=3,
    )
    options.update(kwargs)
    return UL2Objective(docs, **options)


def batches_equal(a, b):
    return all(
        (x is None and y is None) or torch.equal(x, y)
        for x, y in [(a.src_ids, b.src_ids), (a.src_mask, b.src_mask), (a.tgt_ids, b.tgt_ids), (a.labels, b.labels)]
    )


def test_random_windows_are_next_token_pairs_from_the_stream(docs):
    objective = CausalLMObjective(docs, block_size=64, batch_size=4, seed=1)
    batch = objective.next_batch()
    assert batch.src_ids is None and batch.src_mask is None
    assert batch.tgt_ids.shape == batch.labels.shape == (4, 64)
    assert torch.equal(batch.tgt_ids[:, 1:], batch.labels[:, :-1])
    stream = torch.from_numpy(docs.tokens.astype(np.int64))
    first = batch.tgt_ids[0]
    starts = [i for i in range(len(stream) - 64) if torch.equal(stream[i : i + 64], first)]
    assert starts and torch.equal(stream[starts[0] + 1 : starts[0] + 65], batch.labels[0])


def test_sequential_windows_tile_the_stream_in_order(docs):
    objective = CausalLMObjective(docs, block_size=32, batch_size=3, mode="sequential")
    flat = torch.cat([objective.next_batch().tgt_ids.reshape(-1) for _ in range(2)])
    assert torch.equal(flat, torch.from_numpy(docs.tokens[: 6 * 32].astype(np.int64)))


@pytest.mark.parametrize("kind", ["causal", "ul2", "seq2seq"])
def test_resuming_from_state_dict_reproduces_the_uninterrupted_batches(kind, docs, tok):
    def make():
        if kind == "causal":
            return CausalLMObjective(docs, block_size=16, batch_size=4, seed=5)
        if kind == "ul2":
            return ul2(docs, tok, config=UL2Config(max_length=128))
        return Seq2SeqObjective(docs, docs, 16, tok.pad_id, tok.eos_id, tok.decoder_start_id, max_source_len=64, seed=5)

    straight = make()
    reference = [straight.next_batch() for _ in range(30)]
    interrupted = make()
    for _ in range(17):
        interrupted.next_batch()
    state = json.loads(json.dumps(interrupted.state_dict()))
    resumed = make()
    resumed.load_state_dict(state)
    assert all(batches_equal(resumed.next_batch(), expected) for expected in reference[17:])


def test_ul2_batch_follows_the_encoder_decoder_conventions(docs, tok):
    batch = ul2(docs, tok, config=UL2Config(max_length=128)).next_batch()
    assert batch.src_mask.dtype == torch.bool and torch.equal(batch.src_mask, batch.src_ids != tok.pad_id)
    assert (batch.tgt_ids[:, 0] == tok.decoder_start_id).all()
    real = batch.labels != IGNORE_INDEX
    shifted = batch.labels[:, :-1]
    assert torch.equal(batch.tgt_ids[:, 1:][real[:, 1:]], shifted[real[:, 1:]])
    assert (batch.tgt_ids[:, 1:][~real[:, :-1]] == tok.pad_id).all()
    last = real.sum(1) - 1
    assert (batch.labels[torch.arange(8), last] == tok.eos_id).all()
    assert batch.num_tokens == int(real.sum())


def test_ul2_examples_rebuild_their_chunks_and_modes_follow_the_probabilities(docs, tok):
    objective = ul2(docs, tok, config=UL2Config(max_length=128))
    sentinels = np.asarray(tok.sentinel_ids)
    modes = []
    for _ in range(40):
        chunk = int(objective.plan.batches(objective.seed, objective.epoch)[objective.step][0])
        batch = objective.next_batch()
        inputs = batch.src_ids[0][batch.src_mask[0]].numpy()
        targets = batch.labels[0][batch.labels[0] != IGNORE_INDEX].numpy()
        start, length = objective.starts[chunk], objective.lengths[chunk]
        original = objective.tokens[start : start + length].astype(np.int64)
        if targets[-1] == tok.eos_id and original[-1] != tok.eos_id:
            targets = targets[:-1]
        rebuilt = (
            np.concatenate([inputs, targets])
            if batch.modes[0] == "S"
            else rebuild_from_corruption(inputs, targets, sentinels)
        )
        np.testing.assert_array_equal(rebuilt, original)
        modes += batch.modes
    counts = {m: modes.count(m) / len(modes) for m in "RXS"}
    assert abs(counts["S"] - 0.5) < 0.1 and abs(counts["R"] - 0.25) < 0.1 and abs(counts["X"] - 0.25) < 0.1


def test_ul2_mode_tokens_lead_the_input_when_enabled(docs, tok):
    objective = ul2(docs, tok, config=UL2Config(max_length=64, mode_tokens=True), mode_ids=ul2_mode_ids(tok))
    batch = objective.next_batch()
    expected = [tok.special_id(f"[{m}]") for m in batch.modes]
    assert batch.src_ids[:, 0].tolist() == expected
    with pytest.raises(ConfigError, match="mode tokens"):
        ul2_mode_ids(build_tokenizer("byte"))


def test_span_corruption_is_the_r_only_case(docs, tok):
    batch = ul2(docs, tok, config=UL2Config.span_corruption(max_length=100)).next_batch()
    assert set(batch.modes) == {"R"}
    assert (batch.labels[:, 0] == tok.sentinel_ids[0]).all()


def test_ul2_probabilities_must_sum_to_one():
    with pytest.raises(ConfigError, match="sum to 1"):
        UL2Config(r_prob=0.5, x_prob=0.5, s_prob=0.5)


def test_prefix_lm_puts_loss_only_on_the_target():
    prefix, target = np.array([5, 6, 7]), np.array([8, 9, 2])
    batch = collate_prefix_lm([(prefix, target), (np.array([1, 2]), np.array([3]))], pad_id=0)
    assert batch.src_ids is None
    assert batch.tgt_ids[0].tolist() == [5, 6, 7, 8, 9]
    assert batch.labels[0].tolist() == [-100, -100, 8, 9, 2]
    assert batch.labels[1].tolist() == [-100, 3, -100, -100, -100]
    assert batch.prefix_lengths.tolist() == [3, 2]


def test_prefix_lm_objective_splits_documents_like_s(docs, tok):
    batch = prefix_lm_objective(docs, batch_size=4, pad_id=tok.pad_id, eos_id=tok.eos_id, max_length=64).next_batch()
    assert batch.src_ids is None and set(batch.modes) == {"S"}
    assert ((batch.labels != IGNORE_INDEX).sum(1) >= 1).all()


def test_dialogsum_becomes_summarization_batches_with_the_rot5_template(shared_data, tok):
    path = shared_data / "summarization" / "dialogsum" / "dialogsum.dev.jsonl.gz"
    pairs = list(iter_jsonl_pairs(path))[:64]
    sources, targets = tokenize_pairs(tok, pairs, PairTemplate(*SUMMARIZATION))
    objective = seq2seq(sources, targets, 8, tok, max_source_len=4096, max_target_len=512, shuffle=False)
    batch = objective.next_batch()
    source_text = tok.decode([batch.src_ids[0][batch.src_mask[0]].tolist()])[0]
    target_ids = batch.labels[0][batch.labels[0] != IGNORE_INDEX].tolist()
    assert target_ids[-1] == tok.eos_id
    assert (source_text, tok.decode([target_ids])[0]) in [(d + "\nSummary:", s) for d, s in pairs]


def test_truncation_policies_cut_the_right_end_or_drop(tok):
    sources = Documents.from_lists([list(range(10)), list(range(3))])
    targets = Documents.from_lists([[1, 2, 3, 4, 5], [6]])

    def first(truncation):
        objective = seq2seq(
            sources, targets, 2, tok, max_source_len=4, max_target_len=3, truncation=truncation, shuffle=False
        )
        return objective, [objective.example(int(i)) for i in objective.indices]

    _, right = first("right")
    _, left = first("left")
    dropped, kept = first("drop")
    assert right[0][0].tolist() == [0, 1, 2, 3] and left[0][0].tolist() == [6, 7, 8, 9]
    assert right[0][1].tolist() == [1, 2, tok.eos_id]
    assert dropped.indices.tolist() == [1] and kept[0][1].tolist() == [6, tok.eos_id]


def test_length_bucketing_cuts_padding(tok, tinystories_stories):
    texts = tinystories_stories[:640]
    rng = np.random.default_rng(0)
    sources, targets = tokenize_pairs(tok, [(t[: int(rng.integers(20, 800))], t[:20]) for t in texts])

    def padding(bucket_batches):
        objective = seq2seq(sources, targets, 16, tok, max_source_len=1000, bucket_batches=bucket_batches, seed=1)
        batches = [objective.next_batch() for _ in range(objective.batches_per_epoch)]
        return sum(int((~b.src_mask).sum()) for b in batches)

    assert padding(bucket_batches=40) < 0.2 * padding(bucket_batches=1)


def test_batch_moves_to_a_device_and_counts_loss_tokens(docs, tok):
    batch = ul2(docs, tok).next_batch()
    moved = batch.to("cpu")
    assert moved.src_ids.device.type == "cpu" and moved.num_tokens == batch.num_tokens > 0


def test_ul2_batch_of_16_by_512_assembles_in_array_operations_not_token_by_token(tok, tinystories_stories):
    """A batch is built by numpy over whole rows (about 2.5 ms here; a training step takes seconds): its work,
    counted as function calls, stays far below one call per token of its 16 x 512, whatever the machine's load."""
    stream = np.concatenate(tok.encode(tinystories_stories[:300], add_eos=True)).astype(np.uint16)
    usable = len(stream) // 512 * 512
    documents = Documents(stream[:usable], np.arange(0, usable + 1, 512))
    objective = ul2(documents, tok, batch_size=16)
    objective.next_batch()
    with counted_calls() as work:
        for _ in range(20):
            objective.next_batch()
    assert work.calls / 20 < 16 * 512 / 2  # about 1,350 calls a batch here: per row and per span, not per token
