"""The decode state's growing caches (SelfAttentionCache): what was written comes back, past the first buffer
too; beam reorders gather rows (swapping two buffers, or in place in static mode); and rows at positions of their
own (a server's batch) write and read each at its own column."""

import pytest
import torch

import encdec
from encdec.modules import DecodeState, RunningBatch


def write(state: DecodeState, cache, k: torch.Tensor):
    """k (R, K, t, D) as the next t columns of every row: what a model's step does around its attention."""
    state.ensure(k.shape[2])
    got = cache.append(k, -k)
    state.advance(k.shape[2])
    return got


def test_a_step_cache_returns_everything_written_and_grows_past_its_buffer():
    state = DecodeState(2, 2, "cpu", torch.float32)
    cache = state.new_caches(1)[0]
    k = torch.randn(2, 3, 5, 4)
    for t in range(5):
        keys, values = write(state, cache, k[:, :, t : t + 1])
    torch.testing.assert_close(keys, k)
    torch.testing.assert_close(values, -k)
    assert state.columns == 5 and state.capacity >= 5


def test_reorder_handles_rows_that_swap_and_repeat():
    state = DecodeState(4, 8, "cpu", torch.float32)
    cache = state.new_caches(1)[0]
    write(state, cache, torch.arange(4.0).view(4, 1, 1, 1).expand(4, 1, 3, 2).contiguous())
    state.reorder(torch.tensor([1, 0, 0, 3]))  # rows 0 and 1 swap, row 2 copies row 0, row 3 stays
    assert cache.keys[:, 0, :3, 0].tolist() == [[1.0] * 3, [0.0] * 3, [0.0] * 3, [3.0] * 3]
    assert torch.equal(cache.values[:, :, :3], -cache.keys[:, :, :3])


def test_reorders_alternate_between_two_buffers_and_keep_appending_right():
    """Beam reorders gather into a spare buffer and swap: after the first, no allocation, and the cache
    still holds exactly the chosen rows followed by what is written next."""
    state = DecodeState(3, 8, "cpu", torch.float32)
    cache = state.new_caches(1)[0]
    write(state, cache, torch.arange(3.0).view(3, 1, 1, 1).expand(3, 2, 2, 4).contiguous())
    state.reorder(torch.tensor([2, 0, 0]))
    state.reorder(torch.tensor([1, 0, 2]))  # rows now hold 0, 2, 0
    buffers = {cache.keys.data_ptr()}
    state.reorder(torch.tensor([0, 1, 2]))
    buffers.add(cache.keys.data_ptr())
    state.reorder(torch.tensor([0, 1, 2]))
    assert cache.keys.data_ptr() in buffers and len(buffers) == 2
    keys, values = write(state, cache, torch.full((3, 2, 1, 4), 9.0))
    assert keys[:, 0, :, 0].tolist() == [[0.0, 0.0, 9.0], [2.0, 2.0, 9.0], [0.0, 0.0, 9.0]]
    assert torch.equal(values, -keys)


def test_a_static_state_reorders_in_place():
    like = DecodeState(3, 4, "cpu", torch.float32)
    like.new_caches(1, kv_heads=1, d_head=2)
    state = DecodeState.fixed(like, 8, 4)
    cache = state.caches[0]
    pointer = cache.keys.data_ptr()
    for t in range(2):
        cache.append(torch.arange(3.0).view(3, 1, 1, 1).expand(3, 1, 1, 2) + 10 * t, torch.zeros(3, 1, 1, 2))
        state.advance(1)
    state.reorder(torch.tensor([2, 2, 0]))
    assert cache.keys.data_ptr() == pointer
    assert cache.keys[:, 0, :2, 0].tolist() == [[2.0, 12.0], [2.0, 12.0], [0.0, 10.0]]


def test_rows_of_a_batch_write_and_read_each_at_its_own_column():
    """Two states started apart, joined as rows of a batch at columns 2 and 0: each row's keys land at its
    own column, the step reads the widest row's columns, and the causal mask stops each row at its own."""
    batch = RunningBatch("cpu", torch.float32)
    for columns in (2, 0):
        state = DecodeState(1, 6, "cpu", torch.float32)
        cache = state.new_caches(1)[0]
        for t in range(columns):
            write(state, cache, torch.full((1, 1, 1, 2), float(t + 1)))
        batch.join(state, [1])
    assert batch.rows == 2 and batch.columns == 2 and not batch.aligned
    batch.ensure(1)
    positions = batch.positions(1)
    keys, _ = batch.caches[0].append(torch.full((2, 1, 1, 2), 9.0), torch.zeros(2, 1, 1, 2))
    assert positions.tolist() == [[2], [0]]
    assert keys[:, 0, :, 0].tolist() == [[1.0, 2.0, 9.0], [9.0, 0.0, 0.0]]
    mask = batch.self_attention(1, positions).mask  # (R, 1, 1, W): row 1 sees its column 0 alone
    assert (mask[:, 0, 0] == 0).tolist() == [[True, True, True], [True, False, False]]
    batch.advance(1)
    moved = batch.remove([0])
    assert moved == {1: 0} and batch.rows == 1 and batch.columns == 1
    assert batch.caches[0].keys[0, 0, :1, 0].tolist() == [9.0]


@pytest.mark.parametrize("merged", [False, True], ids=["cross-attention", "merged"])
def test_the_rows_of_a_batch_read_one_memory_row_an_example_and_step_as_their_requests_alone(merged):
    """Requests of 3, 1 and 2 rows (samples) joined to a batch hold one memory row each, their rows at slots of
    it; their steps equal each request's own state's (generate's, its memory shared as `groups`), before and
    after the middle request leaves (the last row and memory row moving into its places)."""
    more = {"merged_cross_attention": True, "rope_cross": "none"} if merged else {}
    torch.manual_seed(0)
    config = encdec.preset("t5-tiny", vocab_size=300, pad_id=0, eos_id=1, decoder_start_id=0, **more)
    model = encdec.build_model(config).eval()
    sources = [torch.randint(2, 300, (1, width), generator=torch.Generator().manual_seed(width)) for width in (5, 9, 3)]
    copies = [3, 1, 2]
    batch = RunningBatch("cpu", torch.float32)
    with torch.inference_mode():
        alone = [model.start(source, None, 8, n) for source, n in zip(sources, copies)]
        placed = [batch.join(model.start(source, None, 8), [n])[0] for source, n in zip(sources, copies)]
        readers = batch.memory_readers
        assert batch.memory_rows == 3 and readers.first.tolist() == [0, 3, 4] and readers.others.tolist() == [1, 2, 5]
        assert readers.shared.tolist() == [0, 2] and readers.groups == 2 and readers.slots.tolist() == [0, 1, 2]
        assert batch.memory[0].values.shape[0] < batch.rows  # the memory held once an example, not once a row
        tokens = torch.randint(2, 300, (batch.rows, 1), generator=torch.Generator().manual_seed(1))
        for _ in range(2):
            served = model.step(tokens, batch)
            for state, rows in zip(alone, placed):
                torch.testing.assert_close(
                    served[rows.start : rows.stop], model.step(tokens[rows.start : rows.stop], state)
                )
        moved = batch.remove(list(placed[1]))
        # the third request's row 5 (its second) moves to row 3, its memory row 2 to memory row 1
        assert moved == {5: 3} and batch.memory_rows == 2 and batch.memory_readers.first.tolist() == [0, 4]
        assert batch.memory_readers.others.tolist() == [1, 2, 3] and batch.memory_readers.shared is None
        served = model.step(torch.cat((tokens[:3], tokens[5:], tokens[4:5])), batch)
        torch.testing.assert_close(served[:3], model.step(tokens[:3], alone[0]))
        torch.testing.assert_close(served[3:].flip(0), model.step(tokens[4:], alone[2]))


def test_rows_of_a_batch_step_several_columns_each_from_its_own_and_are_cut_back_each_to_its_own():
    """A served speculative round's check: rows at columns 3 and 1 step three columns at once, which equals three
    single steps; each row then cut back to a column of its own (its accepted drafts) steps on as a batch that
    never wrote the columns it forgot."""
    torch.manual_seed(0)
    config = encdec.preset("t5-tiny", vocab_size=300, pad_id=0, eos_id=1, decoder_start_id=0)
    model = encdec.build_model(config).eval()
    sources = [torch.randint(2, 300, (1, width), generator=torch.Generator().manual_seed(width)) for width in (5, 9)]
    tokens = torch.randint(2, 300, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():

        def batch_at(columns: list[int]) -> RunningBatch:
            batch = RunningBatch("cpu", torch.float32)
            for source, row, n in zip(sources, tokens, columns):
                state = model.start(source, None, 12)
                if n:
                    model.step(row[None, :n], state)
                batch.join(state, [1])
            return batch

        many, one = batch_at([3, 1]), batch_at([3, 1])
        step = torch.stack((tokens[0, 3:6], tokens[1, 1:4]))  # (2, 3) each row's next three
        served = model.step(step, many)
        singles = torch.cat([model.step(step[:, j : j + 1], one) for j in range(3)], dim=1)
        torch.testing.assert_close(served, singles)
        assert many.lengths[:2].tolist() == [6, 4] and many.columns == 6
        many.cut_back(torch.tensor([4, 2]), 4)  # row 0 keeps one of its three, row 1 one
        assert many.lengths[:2].tolist() == [4, 2] and many.columns == 4
        fresh = batch_at([4, 2])
        following = torch.tensor([[7, 8], [9, 10]])
        torch.testing.assert_close(model.step(following, many), model.step(following, fresh))


def test_a_held_row_stops_moving_on_while_the_others_step_as_without_it():
    """A finished request's row held (RunningBatch.hold) keeps its length (less its last column, which each step
    writes over) however many steps pass, and the rows beside it step exactly as a batch without it does; it then
    leaves with a remove like any row."""
    torch.manual_seed(0)
    config = encdec.preset("t5-tiny", vocab_size=300, pad_id=0, eos_id=1, decoder_start_id=0)
    model = encdec.build_model(config).eval()
    sources = [torch.randint(2, 300, (1, width), generator=torch.Generator().manual_seed(width)) for width in (5, 9, 4)]
    tokens = torch.randint(2, 300, (3, 6), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        held, alone = RunningBatch("cpu", torch.float32), RunningBatch("cpu", torch.float32)
        for i, source in enumerate(sources):
            held.join(model.start(source, None, 12), [1])
            if i != 1:
                alone.join(model.start(source, None, 12), [1])
        model.step(tokens[:, :2], held)
        model.step(tokens[[0, 2], :2], alone)
        held.hold(torch.tensor([1]))
        assert held.lengths[:3].tolist() == [2, 1, 2]
        for j in range(2, 6):
            served = model.step(tokens[:, j : j + 1], held)
            torch.testing.assert_close(served[[0, 2]], model.step(tokens[[0, 2], j : j + 1], alone))
        assert held.lengths[:3].tolist() == [6, 1, 6]  # the held row never moved on
        assert held.remove([1]) == {2: 1} and held.rows == 2 and held.lengths[:2].tolist() == [6, 6]
        torch.testing.assert_close(model.step(tokens[[0, 2], :1], held), model.step(tokens[[0, 2], :1], alone))
