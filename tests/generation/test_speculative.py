"""Speculative decoding (generation/speculative.py): greedy equal to plain greedy, sampling of the target's law."""

import pytest
import torch

from encdec import generate
from encdec.errors import ConfigError
from encdec.models import build_model, preset

from .draft_kit import near_copy
from .helpers import padded_batch, tiny
from .law_kit import chi_square_p_value, two_token_counts, two_token_law

FAMILIES = ["t5", "gemma", "transformer-post", "rot5-prepended"]  # T5, T5Gemma, BART/Marian's post-norm layout


def pair(name: str, shares_encoder: bool):
    """A tiny target and a draft of its vocabulary: one decoder layer reading the target's encoder (shares), or a
    model of its own weights."""
    torch.manual_seed(0)
    target = tiny(name)
    torch.manual_seed(1)
    draft = tiny(name, n_decoder_layers=1) if shares_encoder else tiny(name)
    return target, draft


@pytest.mark.parametrize("shares_encoder", [True, False])
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("k", [1, 3, 5])
def test_speculative_greedy_equals_plain_greedy(name, shares_encoder, k):
    target, draft = pair(name, shares_encoder)
    torch.manual_seed(2)
    src, mask = padded_batch(B=3)
    plain = generate(target, src, mask, max_new_tokens=12)
    out = generate(
        target,
        src,
        mask,
        max_new_tokens=12,
        assistant_model=draft,
        assistant_shares_encoder=shares_encoder,
        num_assistant_tokens=k,
        return_dict_in_generate=True,
    )
    assert torch.equal(out.sequences, plain)
    assert out.speculative.target_steps >= 1


def test_rows_of_a_batch_keep_their_own_accepted_drafts_each_as_it_would_alone():
    """Each row of a batch accepts what it accepts alone and advances by it: the batch's counts are the sum of its
    rows' alone, which differ (one count for the batch, its fewest, would keep less than their sum)."""
    target = tiny("t5")
    draft = near_copy(target, 0.5)
    torch.manual_seed(3)
    src, mask = padded_batch(B=4)
    options = dict(max_new_tokens=24, num_assistant_tokens=4, return_dict_in_generate=True, eos_token_id=[])
    batch = generate(target, src, mask, assistant_model=draft, **options)
    alone = [generate(target, src[i : i + 1], mask[i : i + 1], assistant_model=draft, **options) for i in range(4)]
    assert torch.equal(batch.sequences, generate(target, src, mask, max_new_tokens=24, eos_token_id=[]))
    assert torch.equal(batch.sequences, torch.cat([out.sequences for out in alone]))
    rows = [out.speculative for out in alone]
    assert len({stats.target_steps for stats in rows}) > 1  # the rows advanced by different amounts
    assert 0 < batch.speculative.accepted < batch.speculative.drafted
    for name in ("target_steps", "drafted", "accepted"):
        assert getattr(batch.speculative, name) == sum(getattr(stats, name) for stats in rows), name


def test_rows_that_end_at_their_eos_leave_and_are_padded_as_plain_greedy_pads_them():
    target = tiny("t5")
    draft = near_copy(target, 0.5)
    src, mask = padded_batch(B=4)
    options = dict(max_new_tokens=20, return_dict_in_generate=True, output_scores=True)
    plain = generate(target, src, mask, **options)
    options["eos_token_id"] = int(plain.sequences[0, 5])  # a token greedy writes: rows end at different lengths
    plain = generate(target, src, mask, **options)
    out = generate(target, src, mask, assistant_model=draft, num_assistant_tokens=3, **options)
    assert torch.equal(out.sequences, plain.sequences)
    assert (out.sequences == options["eos_token_id"]).any(1).sum() >= 2  # two rows or more ended early
    assert len(out.scores) == len(plain.scores)
    for t, (got, expected) in enumerate(zip(out.scores, plain.scores)):
        live = out.sequences[:, t] != options["eos_token_id"]  # rows not ended before this token
        live &= ~(out.sequences[:, : t + 1] == options["eos_token_id"]).any(1)
        torch.testing.assert_close(got[live], expected[live], rtol=1e-4, atol=1e-4)
        assert (got[~live].argmax(-1) == 0).all()  # a row ended: its pad token, certain


def test_speculative_greedy_equals_plain_greedy_to_the_end_of_a_learned_position_table():
    """transformer-tiny's positions are a table of 160 rows: a round cannot write k columns past a row's end
    there, so the rows draft only what every row has room for, and still decode plain greedy's tokens."""
    target, draft = pair("transformer-post", True)
    src, mask = padded_batch(B=3)
    options = dict(max_new_tokens=160, eos_token_id=[])
    plain = generate(target, src, mask, **options)
    out = generate(target, src, mask, assistant_model=draft, assistant_shares_encoder=True, **options)
    assert torch.equal(out, plain) and out.shape[1] == 161


def test_a_draft_equal_to_its_target_has_every_token_accepted():
    target, _ = pair("t5", False)
    src, mask = padded_batch(B=2)
    out = generate(target, src, mask, max_new_tokens=10, assistant_model=target, return_dict_in_generate=True)
    assert torch.equal(out.sequences, generate(target, src, mask, max_new_tokens=10))
    stats = out.speculative
    assert stats.accepted == stats.drafted


def test_speculative_greedy_equals_plain_greedy_with_processors_a_prefix_and_an_early_eos():
    target, draft = pair("t5", True)
    src, mask = padded_batch(B=3)
    options = dict(max_new_tokens=14, repetition_penalty=1.3, no_repeat_ngram_size=2, decoder_input_ids=src[:, :2])
    plain = generate(target, src, mask, **options)
    options["eos_token_id"] = int(plain[0, 6])  # a token greedy writes: rows end at different lengths
    plain = generate(target, src, mask, **options)
    speculative = generate(target, src, mask, assistant_model=draft, assistant_shares_encoder=True, **options)
    assert torch.equal(speculative, plain)


def test_speculative_sampling_draws_the_first_two_tokens_as_plain_sampling_of_the_target():
    torch.manual_seed(0)
    target = build_model(preset("t5-tiny", vocab_size=12, dropout=0.0)).eval()
    torch.manual_seed(1)
    draft = build_model(preset("t5-tiny", vocab_size=12, dropout=0.0, n_decoder_layers=1)).eval()
    src = torch.tensor([[3, 4, 5, 6, 7]])
    options = dict(do_sample=True, temperature=2.0, top_p=0.95, top_k=0, eos_token_id=[], pad_token_id=0)
    law = two_token_law(target, src, options)
    draws = 4000  # rows of one batch, each keeping its own accepted drafts
    run = dict(options, max_new_tokens=2, seed=0)
    out = generate(target, src.repeat(draws, 1), assistant_model=draft, num_assistant_tokens=2, **run)
    assert chi_square_p_value(two_token_counts(out, 12), draws * law) > 1e-3
    drafts_own = generate(draft, src.repeat(draws, 1), **run)  # the test tells the draft's law from the target's
    assert chi_square_p_value(two_token_counts(drafts_own, 12), draws * law) < 1e-3


@pytest.mark.parametrize(
    "draft_overrides, options, says",
    [
        (dict(vocab_size=90), {}, "the draft's vocab_size is 90 and the model's 97: a draft must share"),
        (dict(d_model=48, n_heads=4), dict(assistant_shares_encoder=True), "of the same width"),
        ({}, dict(num_beams=2), "greedy or sampling, without num_beams > 1"),
        ({}, dict(num_assistant_tokens=0), "num_assistant_tokens"),
        ({}, dict(num_assistant_tokens=65), "num_assistant_tokens"),
        ({}, dict(do_sample=True, mbr=4, mbr_decode=str), "without minimum Bayes risk"),
        ({}, dict(streamer=print), "speculative decoding streams one row \\(2 here\\)"),
    ],
)
def test_a_draft_that_cannot_draft_is_one_sentence(draft_overrides, options, says):
    target = tiny("t5")
    draft = build_model(preset("t5-tiny", **{"vocab_size": 97, "dropout": 0.0, **draft_overrides})).eval()
    src, mask = padded_batch(B=2)
    with pytest.raises(ConfigError, match=says):
        generate(target, src, mask, assistant_model=draft, **options)


def test_num_assistant_tokens_without_a_draft_is_refused():
    src, mask = padded_batch(B=2)
    with pytest.raises(ConfigError, match="needs a draft"):
        generate(tiny("t5"), src, mask, num_assistant_tokens=3)


def test_seeded_speculative_sampling_of_several_sequences_is_reproducible_and_example_major():
    target, draft = pair("t5", True)
    src, mask = padded_batch(B=2)
    options = dict(do_sample=True, num_return_sequences=3, max_new_tokens=8, top_k=10, assistant_model=draft)
    first = generate(target, src, mask, seed=5, assistant_shares_encoder=True, **options)
    again = generate(target, src, mask, seed=5, assistant_shares_encoder=True, **options)
    assert first.shape[0] == 6 and torch.equal(first, again)
    assert not torch.equal(first, generate(target, src, mask, seed=6, assistant_shares_encoder=True, **options))


def test_output_scores_hold_one_step_of_target_scores_per_new_token_as_plain_greedy_s():
    target, draft = pair("t5", True)
    src, mask = padded_batch(B=2)
    options = dict(max_new_tokens=7, return_dict_in_generate=True, output_scores=True)
    plain = generate(target, src, mask, **options)
    speculative = generate(target, src, mask, assistant_model=draft, assistant_shares_encoder=True, **options)
    assert torch.equal(speculative.sequences, plain.sequences)
    assert len(speculative.scores) == len(plain.scores)
    for got, expected in zip(speculative.scores, plain.scores):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
