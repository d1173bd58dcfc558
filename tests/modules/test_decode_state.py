"""The decode state's growing caches (SelfAttentionCache): what was written comes back, past the first buffer
too; beam reorders gather rows (swapping two buffers, or in place in static mode); and rows at positions of their
own (a server's batch) write and read each at its own column."""

import torch

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
