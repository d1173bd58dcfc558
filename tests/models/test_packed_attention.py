"""A packed batch (objective.pack) gives every example the loss and gradients it has alone in a row.

Each encoder-decoder variant keeps packed examples apart by segment masks (encoder,
causal decoder, cross-attention) and counts positions from 0 in each example, for
T5's relative bias, RoPE in self- and cross-attention (both layouts), and learned or
sinusoidal absolute positions.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from encdec.data.batch import IGNORE_INDEX, collate_encoder_decoder
from encdec.data.objectives.packing import collate_packed, first_fit
from encdec.errors import DataError
from encdec.models import build_model, preset

V = 61
VARIANTS = {
    "t5": dict(),
    "t5-v1.1": dict(),
    "rot5": dict(n_kv_heads=2),  # RoPE in self- and cross-attention, grouped-query
    "rot5-prepended": dict(n_kv_heads=2, rope_cross="prepended"),
    "rot5-moe": dict(n_experts=4),
    "transformer-learned": dict(position="learned"),
    "transformer-sinusoidal": dict(),
}


def tiny(name: str):
    family = name.split("-learned")[0].split("-sinusoidal")[0].split("-prepended")[0].split("-moe")[0]
    torch.manual_seed(0)
    return build_model(preset(f"{family}-tiny", vocab_size=V, max_positions=64, dropout=0.0, **VARIANTS[name]))


def examples(n: int = 7, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (rng.integers(3, V, rng.integers(2, 12)), np.append(rng.integers(3, V, rng.integers(1, 8)), 1))
        for _ in range(n)
    ]


def per_example_losses(model, batch, order: list[int] | None = None) -> torch.Tensor:
    """Summed token cross-entropy of each example, in the order the examples were given: (N,).

    `order` lists the example each (row, segment) of a packed batch holds, row by row."""
    out = model(batch.src_ids, batch.tgt_ids, src_mask=batch.src_mask, **batch.packing)
    ce = F.cross_entropy(
        out.logits.flatten(0, 1), batch.labels.flatten(), ignore_index=IGNORE_INDEX, reduction="none"
    ).view(batch.labels.shape)  # (B, T)
    if batch.tgt_segments is None:
        return ce.sum(-1)
    segments = batch.tgt_segments
    sums = torch.stack(
        [ce[b][segments[b] == s].sum() for b in range(ce.shape[0]) for s in range(1, int(segments[b].max()) + 1)]
    )
    return sums[torch.tensor(order).argsort()]


def first_fit_order(data, max_source_len: int, max_target_len: int) -> list[int]:
    """The example each (row, segment) holds, row by row: first fit keeps the examples' order within a row."""
    rows = first_fit([(len(s), len(t)) for s, t in data], max_source_len, max_target_len)
    return [i for row in rows for i in row]


@pytest.mark.parametrize("name", VARIANTS)
def test_a_packed_batch_gives_each_example_its_unpacked_loss_and_gradients(name, one_thread):
    model = tiny(name)
    data = examples()
    packed = collate_packed(data, pad_id=0, decoder_start_id=0, max_source_len=16, max_target_len=12)
    assert packed.src_ids.shape[0] < len(data)  # several examples share a row
    unpacked = collate_encoder_decoder(data, pad_id=0, decoder_start_id=0)
    alone = per_example_losses(model, unpacked)  # (N,)
    together = per_example_losses(model, packed, first_fit_order(data, 16, 12))
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)
    grads = []
    for loss in (alone.sum(), together.sum()):
        model.zero_grad()
        loss.backward(retain_graph=True)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[1], grads[0], atol=1e-4, rtol=1e-4)


def test_the_packed_masks_are_what_change_the_loss():
    """Without its segments the same packed batch leaks attention across examples: the losses differ."""
    model = tiny("t5")
    packed = collate_packed(examples(), pad_id=0, decoder_start_id=0, max_source_len=16, max_target_len=12)
    with torch.no_grad():
        right = model(packed.src_ids, packed.tgt_ids, src_mask=packed.src_mask, labels=packed.labels, **packed.packing)
        leaky = model(packed.src_ids, packed.tgt_ids, src_mask=packed.src_mask, labels=packed.labels)
    assert abs(right.ce_loss.item() - leaky.ce_loss.item()) > 1e-3


def test_a_packed_batch_without_all_four_layout_tensors_is_refused():
    model = tiny("t5")
    packed = collate_packed(examples(), pad_id=0, decoder_start_id=0, max_source_len=16, max_target_len=12)
    with pytest.raises(DataError, match="together"):
        model(packed.src_ids, packed.tgt_ids, src_segments=packed.src_segments)
