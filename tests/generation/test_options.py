"""Options are checked once; bad inputs and options are one clear sentence; processors behave as HF's.

Models and processors run on the device under test; inputs come from the host.
"""

import math

import pytest
import torch

import encdec
from encdec.errors import ConfigError, DataError
from encdec.generation.logits_processors import bad_words, no_repeat_ngram, repetition_penalty, top_k, top_p

from .helpers import padded_batch, tiny


@pytest.mark.parametrize("option", [dict(temperature=0.7), dict(top_k=5), dict(top_p=0.9), dict(min_p=0.1)])
def test_a_sampling_option_without_sampling_is_one_sentence_not_ignored(device, option):
    """Asked by the caller, that is: a checkpoint's own temperature beside do_sample false is kept as
    Hugging Face keeps it, and an option at its off value is no request."""
    model = tiny("t5").to(device)
    src, mask = padded_batch()
    name = next(iter(option))
    with pytest.raises(ConfigError, match=f"{name} acts only when sampling.*add do_sample"):
        encdec.generate(model, src, mask, max_new_tokens=2, **option)
    encdec.generate(model, src, mask, max_new_tokens=2, do_sample=True, seed=0, **option)
    encdec.generate(model, src, mask, max_new_tokens=2, temperature=1.0, top_k=50)
    model.generation_defaults = {"temperature": 0.6, "do_sample": False}  # as many checkpoints ship
    encdec.generate(model, src, mask, max_new_tokens=2)


def test_an_unknown_option_is_named_with_a_suggestion(device):
    model = tiny("t5").to(device)
    src, mask = padded_batch()
    with pytest.raises(ConfigError, match="unknown generation option 'num_beam'; did you mean 'num_beams'"):
        encdec.generate(model, src, mask, num_beam=4)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(num_beams=0), "num_beams must be a positive integer"),
        (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
        (dict(early_stopping="sometimes"), "early_stopping must be True, False or 'never'"),
        (dict(num_beams=2, num_return_sequences=3), r"num_return_sequences \(3\) cannot exceed num_beams \(2\)"),
        (dict(num_return_sequences=2), "needs beam search"),
        (dict(typical_p=0.0), r"typical_p must be in \(0, 1\]"),
        (dict(min_p=1.5), r"min_p must be None \(off\) or in \[0, 1\]"),
        (dict(epsilon_cutoff=1.0), r"epsilon_cutoff must be in \[0, 1\)"),
        (dict(eta_cutoff=-0.1), r"eta_cutoff must be in \[0, 1\)"),
        (dict(num_beam_groups=0), "num_beam_groups must be a positive integer"),
        (dict(diversity_penalty=-1.0), r"diversity_penalty must be zero \(off\) or more"),
        (dict(exponential_decay_length_penalty=(5, -1.0)), r"exponential_decay_length_penalty must be None or a pair"),
        (dict(suppress_tokens=[-1]), "suppress_tokens must be None or a list of token ids"),
        (dict(begin_suppress_tokens="7"), "begin_suppress_tokens must be None or a list of token ids"),
        (dict(stop_strings=""), "stop_strings must be None, a non-empty string or a list of them"),
        (dict(num_beams=5, num_beam_groups=2, diversity_penalty=1.0), r"num_beams \(5\) must be a multiple of"),
        (dict(num_beams=4, num_beam_groups=2), "num_beam_groups > 1 needs diversity_penalty > 0"),
        (dict(num_beams=4, diversity_penalty=1.0), "diversity_penalty needs num_beam_groups > 1"),
        (dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0, do_sample=True), "does not sample"),
        (dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0, stop_strings="x"), "not group beams"),
        (dict(output_scores=True), "output_scores needs return_dict_in_generate=True"),
    ],
)
def test_an_out_of_range_option_is_one_sentence(options, message, device):
    model = tiny("t5").to(device)
    src, mask = padded_batch()
    with pytest.raises(ConfigError, match=message):
        encdec.generate(model, src, mask, **options)


@pytest.mark.parametrize(
    "prefix, message",
    [
        (torch.tensor([0, 5]), r"decoder_input_ids must be a \(batch, length\) tensor of integer token ids"),
        (torch.zeros(2, 2, dtype=torch.long), "decoder_input_ids has 2 rows but src_ids has 3"),
        (torch.tensor([[0, 500]] * 3), r"decoder_input_ids must lie in \[0, 97\); got 0\.\.500"),
    ],
)
def test_a_bad_decoder_prefix_is_one_sentence(prefix, message, device):
    model = tiny("t5").to(device)
    src, mask = padded_batch()
    with pytest.raises(DataError, match=message):
        encdec.generate(model, src, mask, decoder_input_ids=prefix)


def test_an_empty_input_is_one_clear_error(device):
    model = tiny("t5").to(device)
    with pytest.raises(DataError, match="the input is empty"):
        encdec.generate(model, torch.zeros(1, 0, dtype=torch.long))
    src, mask = padded_batch()
    mask[1] = False
    with pytest.raises(DataError, match="input row 1 is empty"):
        encdec.generate(model, src, mask)
    with pytest.raises(DataError, match="input row 1 is empty"):  # inputs already on the device: checked there
        encdec.generate(model, src.to(device), mask.to(device))


def test_an_input_longer_than_the_position_table_is_one_clear_error(device):
    model = tiny("transformer-pre").to(device)  # sinusoidal table of 160 positions
    with pytest.raises(ConfigError, match="the input has 200 tokens but this model allows at most 160"):
        encdec.generate(model, torch.randint(3, 90, (1, 200)))
    with pytest.raises(ConfigError, match="max_new_tokens is 300"):
        encdec.generate(model, torch.randint(3, 90, (1, 5)), max_new_tokens=300)


def test_out_of_vocabulary_ids_are_refused(device):
    model = tiny("t5").to(device)
    with pytest.raises(DataError, match=r"token ids must lie in \[0, 97\); got 5\.\.500"):
        encdec.generate(model, torch.tensor([[5, 500]]))
    with pytest.raises(DataError, match=r"got -1\.\.5"):
        encdec.generate(model, torch.tensor([[5, -1]], device=device))


def test_min_new_tokens_delays_eos_and_max_new_tokens_bounds_the_length(device):
    model = tiny("t5").to(device)
    src, mask = padded_batch()
    first = encdec.generate(model, src, mask, max_new_tokens=3, eos_token_id=[])
    eos = int(first[0, 1])  # the first token greedy picks becomes EOS
    out = encdec.generate(model, src, mask, max_new_tokens=9, min_new_tokens=4, eos_token_id=eos)
    assert out.shape[1] <= 10
    assert not (out[:, 1:5] == eos).any()


def test_a_streamer_receives_every_step_in_order(device):
    model = tiny("rot5").to(device)
    src, mask = padded_batch()
    seen = []
    out = encdec.generate(model, src, mask, max_new_tokens=6, streamer=lambda tokens: seen.append(tokens.clone()))
    assert torch.equal(torch.stack(seen, dim=1), out[:, 1:])


def test_no_repeat_ngram_bans_exactly_the_completing_tokens(device):
    seqs = torch.tensor([[0, 5, 6, 7, 5, 6]], device=device)  # the trigram (5, 6, 7) exists; the row ends (5, 6)
    scores = no_repeat_ngram(3)(seqs, torch.zeros(1, 10, device=device)).cpu()
    assert scores[0, 7] == -math.inf
    assert (scores[0, torch.arange(10) != 7] == 0).all()


def test_repetition_penalty_divides_positive_and_multiplies_negative_scores(device):
    scores = torch.tensor([[2.0, -2.0, 1.0]], device=device)
    out = repetition_penalty(2.0)(torch.tensor([[0, 1]], device=device), scores)
    assert out.tolist() == [[1.0, -4.0, 1.0]]


def test_top_k_and_top_p_keep_the_most_likely_tokens(device):
    scores = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]], device=device))
    assert torch.isinf(top_k(2)(None, scores)).tolist() == [[False, False, True, True]]
    assert torch.isinf(top_p(0.7)(None, scores)).tolist() == [[False, False, True, True]]


def test_bad_words_ban_single_tokens_everywhere_and_longer_words_after_their_prefix(device):
    ban = bad_words([[2], [5, 6, 7]], device)
    seqs = torch.tensor([[0, 5, 6], [0, 6, 5]], device=device)  # only row 0 ends with the prefix (5, 6)
    scores = ban(seqs, torch.zeros(2, 10, device=device)).cpu()
    assert torch.isinf(scores).nonzero().tolist() == [[0, 2], [0, 7], [1, 2]]


@pytest.mark.parametrize("k, p, keep", [(50, 0.95, 1), (5, 0.5, 1), (20, 0.9, 3), (1, 0.9, 1), (300, 0.99, 1)])
def test_top_k_then_top_p_equals_the_two_in_turn_to_the_bit(k, p, keep, device, monkeypatch):
    """The fused processor, which skips top_p's sort over the vocabulary, returns what top_k then top_p
    return, including rows with -inf scores already (min-new-tokens, bad words); a batch with a tie at the
    k-th score runs the two as they are."""
    from encdec.generation.logits_processors import top_k_then_top_p

    torch.manual_seed(0)
    scores = torch.randn(6, 257, device=device) * 3
    scores[1, :200] = -math.inf  # fewer finite scores than some k
    scores[2, 10] = -math.inf
    tied = scores.clone()
    tied[3, 7] = tied[3].topk(min(max(k, keep), 257)).values[-1]  # one more score equal to the k-th
    sort, sorts = torch.sort, []
    monkeypatch.setattr(torch, "sort", lambda *a, **kw: sorts.append(1) or sort(*a, **kw))
    for batch, sorted_on_cpu in ((scores, 0), (tied, 1 if k < 257 else 0)):
        want = top_p(p, keep)(None, top_k(k, keep)(None, batch))
        sorts.clear()
        assert torch.equal(top_k_then_top_p(k, p, keep)(None, batch), want)
        assert len(sorts) == (sorted_on_cpu if device.type == "cpu" else 1)  # the sort skipped where it can be


def test_an_exponential_decay_past_a_floats_range_ends_rows_instead_of_raising():
    """factor ** steps overflows Python's float after ~1,750 steps at 1.5 (Hugging Face raises OverflowError):
    the EOS score is pushed to infinity, so each row ends there."""
    from encdec.generation.logits_processors import exponential_decay

    apply = exponential_decay(0, 1e300, [1])
    scores = torch.tensor([[0.5, -2.0, 3.0], [0.1, 0.0, 0.2]])
    out = apply(torch.zeros(2, 4, dtype=torch.long), scores)
    assert out[0, 1] == float("inf") and out[1, 1] == 0.0 and not out.isnan().any()
    assert torch.equal(out[:, [0, 2]], scores[:, [0, 2]])
