"""Shared checks of the research families: cached decoding and generate() against the full forward."""

import torch

import encdec
from encdec.models import build_model, preset

V = 61  # a tiny vocabulary keeps every check well under a second
# the research families' layout options all on: alternating sublayers, positions subtracted (then a LayerNorm) and
# added to the decoder's input, a LayerNorm before the decoder's feed-forward; each test adds its own loss options
RESEARCH_LAYOUT = dict(
    order_type="ALT", sub_pos_embed="YES_LN", add_pos_embed_to_decoder=True, add_ln_before_decoder_ff=True
)
# each family with every option on: the layout and encoder-loss options of its own section of SEEDS.md (3 and 4)
AR_ALL_ON = dict(RESEARCH_LAYOUT, embedding_loss="LOG_COSINE", detach="EMBEDDING", embedding_ln_type="AVG_CUM_SUM")
PARALLEL_ALL_ON = dict(
    RESEARCH_LAYOUT, embedding_loss="COSINE", embedding_loss_coeff=2.0, embedding_ln_type="AVG_CUM_SUM"
)


def tiny(name: str, **overrides):
    """A tiny model of preset `name` in eval mode, deterministic weights."""
    torch.manual_seed(0)
    cfg = preset(name, vocab_size=V, pad_id=V - 2, eos_id=V - 1, decoder_start_id=0, **overrides)
    return build_model(cfg).eval()


def full_logits(model, ids: torch.Tensor, src_ids: torch.Tensor | None = None) -> torch.Tensor:
    with torch.no_grad():
        return model(src_ids, ids).logits


def device_of(model) -> torch.device:
    return next(model.parameters()).device


def assert_lm_cached_equals_full(model, prompt_len: int = 5, length: int = 12, beams: int = 2) -> None:
    """Prefill a prompt, step in chunks of 3 then 1, reorder the beams: logits equal the full forward's."""
    device = device_of(model)
    ids = torch.randint(0, V - 2, (2, length), device=device)
    state = model.start(ids[:, :prompt_len], None, length, beams)
    swap = torch.tensor([1, 0, 3, 2], device=device)  # exchange the two beams of each example (identical so far)
    state.reorder(swap)
    rows = ids.repeat_interleave(beams, dim=0)
    got = [model.step(torch.zeros_like(rows[:, :1]), state)]  # the decoder-start placeholder
    got.append(model.step(rows[:, prompt_len : prompt_len + 3], state))
    for t in range(prompt_len + 3, length):
        got.append(model.step(rows[:, t : t + 1], state))
    expected = full_logits(model, rows)[:, prompt_len - 1 :]
    torch.testing.assert_close(torch.cat(got, dim=1), expected, atol=1e-5, rtol=1e-5)


def assert_lm_generate_is_greedy_over_full_forward(model, prompt_len: int = 6, new: int = 7) -> None:
    """generate(greedy)[:, 1:] is the argmax continuation of the prompt, recomputed in full each step."""
    prompt = torch.randint(0, V - 2, (2, prompt_len), device=device_of(model))
    out = encdec.generate(model, prompt, max_new_tokens=new, eos_token_id=[])
    seq = prompt
    for _ in range(new):
        seq = torch.cat((seq, full_logits(model, seq)[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert out[:, 0].eq(model.config.decoder_start_id).all()
    assert torch.equal(out[:, 1:], seq[:, prompt_len:])
