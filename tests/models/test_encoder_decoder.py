import pytest
import torch

from encdec.models import build_model, count_parameters, preset
from encdec.modules import RotaryEmbedding

V = 97
FAMILIES = {
    "t5": dict(),
    "t5-v1.1": dict(),
    "rot5": dict(),
    "rot5-prepended": dict(rope_cross="prepended"),
    "rot5-moe": dict(n_experts=4),
    "rot5-cross-heads": dict(cross_n_heads=2, cross_n_kv_heads=1),  # cross heads of their own width: own RoPE table
    "transformer-post": dict(),
    "transformer-pre": dict(norm_position="pre"),
}


def tiny(name: str):
    family = name.split("-post")[0].split("-pre")[0].split("-moe")[0].split("-cross")[0]
    return build_model(preset(f"{family}-tiny", vocab_size=V, max_positions=64, **FAMILIES[name])).eval()


def batch(B=3, S=11, T=9, device="cpu"):
    src = torch.randint(3, V, (B, S), device=device)
    mask = torch.ones(B, S, dtype=torch.bool, device=device)
    if B == 3:  # three source lengths: full, 7 and 3
        mask[1, 7:] = False
        mask[2, 3:] = False
    return src, mask, torch.randint(3, V, (B, T), device=device)


@pytest.mark.parametrize("name", FAMILIES)
def test_incremental_decoding_through_the_cache_equals_the_full_forward(name, device):
    model = tiny(name).to(device)
    src, mask, tgt = batch(device=device)
    full = model(src, tgt, src_mask=mask).logits
    state = model.start(src, mask, max_new_tokens=3)  # room for 4 positions: outgrown on purpose
    steps = [model.step(tgt[:, :3], state)]  # a prefill of 3, then one at a time
    steps += [model.step(tgt[:, t : t + 1], state) for t in range(3, tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", FAMILIES)
def test_padding_does_not_change_outputs_at_real_positions(name, device):
    model = tiny(name).to(device)
    src, _, tgt = batch(B=1, S=6, device=device)
    padded = torch.cat([src, torch.randint(3, V, (1, 5), device=device)], dim=1)
    mask = torch.tensor([[True] * 6 + [False] * 5], device=device)
    torch.testing.assert_close(model(padded, tgt, src_mask=mask).logits, model(src, tgt).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["t5", "rot5", "transformer-pre"])
def test_a_batch_equals_its_examples_run_one_by_one(name, device):
    model = tiny(name).to(device)
    src, mask, tgt = batch(device=device)
    together = model(src, tgt, src_mask=mask).logits
    for b in range(3):
        length = int(mask[b].sum())
        alone = model(src[b : b + 1, :length], tgt[b : b + 1]).logits
        torch.testing.assert_close(together[b : b + 1], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["t5", "rot5", "transformer-post"])
def test_perturbing_a_future_target_token_changes_no_earlier_logits(name, device):
    model = tiny(name).to(device)
    src, mask, tgt = batch(device=device)
    changed = tgt.clone()
    changed[:, 5] = (changed[:, 5] + 1) % V
    a, b = model(src, tgt, src_mask=mask).logits, model(src, changed, src_mask=mask).logits
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_rot5_cross_attention_positions_give_scores_that_depend_on_i_minus_j():
    rope = RotaryEmbedding(16)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(qp, kp):
        return (rope(q, torch.tensor([qp])) @ rope(k, torch.tensor([kp])).transpose(-1, -2)).item()

    src = torch.randint(3, V, (1, 6))
    mask = torch.tensor([[True] * 4 + [False] * 2])
    for mode, expected_shift in (("relative", 0), ("prepended", 4)):  # prepended: after the 4 real tokens
        model = build_model(preset("rot5-tiny", vocab_size=V, rope_cross=mode)).eval()
        memory = model.encode(src, mask)
        inputs = model.decoder._cross_inputs(torch.arange(2, 5), memory, torch.float32)
        q_pos, k_pos = inputs.q_pos.reshape(-1), inputs.k_pos
        for i, qp in enumerate(q_pos.tolist()):
            for j, kp in enumerate(k_pos.tolist()):
                assert qp - kp == (i + 2) + expected_shift - j
                assert score(qp, kp) == pytest.approx(score(qp - kp + 50, 50), abs=1e-4)


def test_loss_is_cross_entropy_over_labels_not_minus_100():
    model = tiny("t5")
    src, mask, tgt = batch()
    labels = tgt.clone()
    labels[:, 6:] = -100
    out = model(src, tgt, src_mask=mask, labels=labels)
    expected = torch.nn.functional.cross_entropy(out.logits[:, :6].reshape(-1, V), labels[:, :6].reshape(-1))
    torch.testing.assert_close(out.loss, expected)


def test_moe_model_reports_aux_and_z_losses_by_side_and_adds_them_to_the_loss():
    model = tiny("rot5-moe")
    src, mask, tgt = batch()
    out = model(src, tgt, src_mask=mask, labels=tgt)
    assert set(out.aux_losses) == {"moe_aux_encoder", "moe_aux_decoder", "moe_z_encoder", "moe_z_decoder"}
    extra = 0.001 * sum(out.aux_losses.values())
    torch.testing.assert_close(out.loss, out.ce_loss + extra)


def test_training_step_reduces_loss_on_a_repeated_batch():
    model = tiny("rot5").train()
    src, mask, tgt = batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        loss = model(src, tgt, src_mask=mask, labels=tgt).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_rot5_mini_has_the_seeds_46_8m_parameters():
    model = build_model(preset("rot5-mini"))
    assert round(count_parameters(model) / 1e5) == 468


def test_parameter_count_without_positions_drops_learned_tables_only():
    model = build_model(preset("transformer-tiny", position="learned", vocab_size=V, max_positions=64))
    assert count_parameters(model) - count_parameters(model, exclude_positions=True) == 2 * 64 * 64


def test_many_packed_sources_fill_rows_as_wide_as_the_longest_and_encode_as_padded(monkeypatch):
    """The server's joins pack many sources end to end by first fit into rows as wide as the longest source
    (rounded up to 16 tokens): 80 sources of 4 to 12 tokens fill within 10% of their total over 16 rows, not 80
    padded rows, each row's scores a padded source's square at most, and each source's encoding is its padded one."""
    torch.manual_seed(0)
    model = build_model(preset("t5-tiny", vocab_size=V, dropout=0.0)).eval()
    lengths = torch.randint(4, 13, (80,), generator=torch.Generator().manual_seed(1))
    src = torch.randint(3, V, (80, 12), generator=torch.Generator().manual_seed(2))
    mask = torch.arange(12)[None, :] < lengths[:, None]
    shapes, encoder_forward = [], model.encoder.forward

    def recorded(ids, *args, **kwargs):
        shapes.append(tuple(ids.shape))
        return encoder_forward(ids, *args, **kwargs)

    monkeypatch.setattr(model.encoder, "forward", recorded)
    with torch.no_grad():
        packed = model.encode_packed(src, mask)
        padded = model.encode(src, mask)
    rows, width = shapes[0]
    fewest = -(-int(lengths.sum()) // 16)  # 43: 675 tokens; 80 rows padded
    assert width == 16 and fewest <= rows <= 1.1 * fewest
    torch.testing.assert_close(packed.hidden[mask], padded.hidden[mask], atol=1e-5, rtol=1e-5)
    assert bool((packed.mask == mask).all())


@pytest.mark.parametrize("name", FAMILIES)
def test_a_packed_start_decodes_as_a_padded_one(name, device):
    """start(packed=True) encodes the sources end to end in packed rows: the steps after it give the padded
    start's logits (left-padded sources too, whose real tokens move first)."""
    model = tiny(name).to(device)
    src, mask, tgt = batch(device=device)
    left = torch.stack([torch.cat((row[~m], row[m])) for row, m in zip(src, mask)])
    left_mask = torch.stack([torch.cat((m[~m], m[m])) for m in mask])
    padded = model.start(src, mask, max_new_tokens=4)
    for ids, m in ((src, mask), (left, left_mask)):
        packed = model.start(ids, m, max_new_tokens=4, packed=True)
        for t in range(3):
            torch.testing.assert_close(
                model.step(tgt[:, t : t + 1], packed), model.step(tgt[:, t : t + 1], padded), atol=1e-5, rtol=1e-5
            )
        padded = model.start(src, mask, max_new_tokens=4)
