"""Each layer's decoding cache behind one protocol (encdec.modules.layer_caches): the kinds a decode state's
bag holds all answer it; the cross-attention keys and values of an example are held once, whatever number of
beams or samples read them; a running batch moves every kind of cache when rows join and leave."""

import pytest
import torch

import encdec
from encdec.models import build_model, preset
from encdec.modules import CrossAttentionCache, DecodeState, LayerState, RunningBatch, SelfAttentionCache

PROTOCOL = [name for name in vars(LayerState) if not name.startswith("_")]


@pytest.mark.parametrize("kind", [SelfAttentionCache, CrossAttentionCache])
def test_every_cache_kind_answers_the_whole_protocol(kind):
    assert PROTOCOL and all(callable(getattr(kind, name, None)) for name in PROTOCOL)


def tiny(**overrides):
    cfg = preset("t5-tiny", vocab_size=97, max_positions=160, dropout=0.0, **overrides)
    return build_model(cfg).eval()


@pytest.mark.parametrize(
    "options, rows",
    [
        (dict(num_beams=4), 4),
        (dict(do_sample=True, num_return_sequences=3, seed=0), 3),
        (dict(num_beams=4, num_beam_groups=2, diversity_penalty=0.5), 4),
    ],
    ids=["beams", "samples", "beam-groups"],
)
def test_an_example_s_cross_attention_keys_are_held_once_for_all_its_rows(options, rows, monkeypatch):
    model = tiny()
    started = []
    start = model.start

    def recorded(*args, **kwargs):
        started.append(start(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(model, "start", recorded)
    src = torch.randint(2, 97, (2, 7))
    encdec.generate(model, src, max_new_tokens=3, **options)
    (state,) = started
    assert state.rows == 2 * rows and state.groups == rows
    for cache in state.memory:
        assert cache.values.shape[0] == 2  # (M, K, S, D): one memory row per example


def started_state(columns: int, width: int, fill: float) -> DecodeState:
    """A state `start` could have made for one example: `columns` written, a memory of `width` positions."""
    state = DecodeState(1, 6, "cpu", torch.float32)
    cache = state.new_caches(1, kv_heads=1, d_head=2)[0]
    for _ in range(columns):
        state.ensure(1)
        cache.append(torch.full((1, 1, 1, 2), fill), torch.full((1, 1, 1, 2), -fill))
        state.advance(1)
    memory = torch.full((1, 1, width, 2), fill)
    state.set_memory([(memory, -memory)], torch.ones(1, width, dtype=torch.bool))
    return state


def test_a_running_batch_moves_memory_and_step_caches_alike_when_rows_leave():
    batch = RunningBatch("cpu", torch.float32)
    batch.join(started_state(2, 3, 1.0), [2])  # two rows (beams) of one example, a memory of 3
    batch.join(started_state(1, 5, 2.0), [1])  # one row, a wider memory of 5
    assert batch.rows == 3 and batch.memory_width == 5
    # one memory row per example, the two beams sharing theirs: rows 0 and 2 read memory rows 0 and 1 first, row 1
    # memory row 0 in a second pass (the only memory row shared)
    assert batch.memory_rows == 2 and batch.memory[0].values.shape[0] == 2
    assert batch.memory[0].keys[:2, 0, :5, 0].tolist() == [[1.0] * 3 + [0.0] * 2, [2.0] * 5]
    assert (batch.memory_mask[:2, 0, 0, :5] == 0).tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    readers = batch.memory_readers
    assert readers.first.tolist() == [0, 2] and readers.memory_of_row.tolist() == [0, 0, 1]
    assert readers.others.tolist() == [1] and readers.shared.tolist() == [0] and readers.slots.tolist() == [0]
    moved = batch.remove([0, 1])
    assert moved == {2: 0} and batch.rows == 1 and batch.memory_width == 5 and batch.columns == 1
    assert batch.memory_rows == 1 and batch.memory_readers is None  # row r reads memory row r: no gather
    assert batch.memory[0].values[0, 0, :5, 0].tolist() == [-2.0] * 5
    assert batch.caches[0].keys[0, 0, :1, 0].tolist() == [2.0]
    inputs = batch.memory_attention(batch.positions(1))
    assert inputs.mask.shape == (1, 1, 1, 5) and bool((inputs.mask == 0).all())


def test_a_running_batch_holds_its_memory_as_wide_as_its_widest_row_and_steps_read_it_as_one_block():
    batch = RunningBatch("cpu", torch.float32)
    for width, fill in ((3, 1.0), (5, 2.0), (2, 3.0)):
        batch.join(started_state(1, width, fill), [1])
    assert batch.memory_width == 5 and batch.memory[0].values.shape[2] == 5 and batch.memory_mask.shape[3] == 5
    assert batch.memory_readers is None  # one row a memory row, in order
    views = batch.memory_attention(batch.positions(1))
    step_memory = batch.memory[0].view(batch.memory_rows, batch.memory_width)
    assert step_memory.keys.is_contiguous() and step_memory.values.is_contiguous()
    assert views.mask.shape[-1] == 5
    moved = batch.remove([1])  # the widest leaves: the buffers are laid out again at the widest left
    assert moved == {2: 1} and batch.memory_width == 3
    assert batch.memory[0].values.shape[2] == 3 and batch.memory_mask.shape[3] == 3
    assert batch.memory[0].keys[:2, 0, :, 0].tolist() == [[1.0] * 3, [3.0] * 2 + [0.0]]
    assert (batch.memory_mask[:2, 0, 0] == 0).tolist() == [[True] * 3, [True, True, False]]
    batch.join(started_state(1, 4, 4.0), [1])  # a wider one joins: laid out again, what is held kept
    assert batch.memory[0].values.shape[2] == 4
    assert batch.memory[0].values[:3, 0, :, 0].tolist() == [[-1.0] * 3 + [0.0], [-3.0] * 2 + [0.0] * 2, [-4.0] * 4]
    assert (batch.memory_mask[:3, 0, 0] == 0).tolist() == [[True] * 3 + [False], [True] * 2 + [False] * 2, [True] * 4]


def test_an_emptied_batch_gives_its_buffers_back_and_takes_rows_again():
    batch = RunningBatch("cpu", torch.float32)
    batch.join(started_state(4, 5, 1.0), [3])
    batch.remove([0, 1, 2])
    assert list(batch.bag) == [] and batch.memory_mask is None and batch.capacity_rows == 0
    (rows,) = batch.join(started_state(1, 2, 3.0), [1])
    assert list(rows) == [0] and batch.columns == 1 and batch.memory_width == 2
    assert batch.caches[0].keys[0, 0, :1, 0].tolist() == [3.0]
    assert batch.memory[0].keys[0, 0, :2, 0].tolist() == [3.0, 3.0]


def test_a_fixed_shape_state_is_blank_caches_of_the_same_kinds_loaded_from_a_start():
    like = started_state(0, 3, 1.0)
    fixed = DecodeState.fixed(like, 8, 4)
    assert [type(c) for c in fixed.bag] == [type(c) for c in like.bag] == [SelfAttentionCache, CrossAttentionCache]
    fixed.load(like)
    assert fixed.memory[0].keys[0, 0, :, 0].tolist() == [1.0, 1.0, 1.0, 0.0]
    assert (fixed.memory_mask[0, 0, 0] == 0).tolist() == [True, True, True, False]
