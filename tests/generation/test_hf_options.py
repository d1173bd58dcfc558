"""Hugging Face's generate() options in encdec.generate: token for token (and score for score) equal to HF
on random-weight T5 models, or, for group beam search (which transformers 5 no longer ships), its invariants.

CPU only, like test_hf_parity.py; sampling is compared by seeding torch's default generator before each
library's call, since both draw from it the same way.
"""

import pytest
import torch
from device_check import DeviceCheck

import encdec
from encdec.errors import ConfigError
from encdec.generation.stop_strings import StopStrings, stop_strings_for, token_texts

from .helpers import hf_t5_pair, padded_batch, tiny, word_piece_tokenizer

transformers = pytest.importorskip("transformers")
StopStringCriteria = transformers.generation.stopping_criteria.StopStringCriteria

MODES = {
    "greedy": dict(),
    "beam": dict(num_beams=3, num_return_sequences=2, length_penalty=0.8),
    "sampling": dict(do_sample=True, top_k=20, num_return_sequences=2),
    "beam-sampling": dict(do_sample=True, num_beams=3, top_k=10),
}
PROCESSORS = {  # each option in the searches it applies to
    "suppress": dict(suppress_tokens=[5, 7]),
    "suppress-beam": dict(num_beams=3, suppress_tokens=[5], begin_suppress_tokens=[8, 9]),
    "begin-suppress-forced-bos": dict(forced_bos_token_id=4, begin_suppress_tokens=[11, 12]),
    "exponential-decay": dict(exponential_decay_length_penalty=(0, 3.0)),
    "exponential-decay-beam": dict(num_beams=3, exponential_decay_length_penalty=(1, 2.0)),
    "renormalize-beam": dict(num_beams=3, renormalize_logits=True, repetition_penalty=1.5),
    "typical": dict(do_sample=True, typical_p=0.6, top_k=0),
    "min-p": dict(do_sample=True, min_p=0.3, temperature=0.7, top_k=0),
    "epsilon": dict(do_sample=True, epsilon_cutoff=0.02, top_k=0),
    "eta": dict(do_sample=True, eta_cutoff=0.02, top_k=0),
    "beam-sampling-warpers": dict(
        do_sample=True,
        num_beams=2,
        typical_p=0.8,
        min_p=0.1,
        epsilon_cutoff=0.005,
        eta_cutoff=0.005,
        renormalize_logits=True,
    ),
}
PREFIX_MODES = {
    "greedy": dict(),
    "beam": dict(num_beams=3, num_return_sequences=2, min_new_tokens=2),
    "sampling": dict(do_sample=True, num_return_sequences=2),
}


@pytest.fixture(scope="module")
def t5_pair(tmp_path_factory):
    return hf_t5_pair(tmp_path_factory.mktemp("t5"), seed=1, initializer_factor=2.0)


@pytest.fixture(scope="module")
def batch(t5_pair):
    """A padded batch of 4 and as EOS a token greedy emits in most rows, so rows end at different steps."""
    reference, _ = t5_pair
    torch.manual_seed(1)
    src, mask = torch.randint(2, 99, (4, 20)), torch.ones(4, 20, dtype=torch.long)
    mask[1, 12:], mask[2, 3:] = 0, 0
    src = src.masked_fill(mask == 0, 0)
    free = reference.generate(input_ids=src, attention_mask=mask, max_new_tokens=12, eos_token_id=None)
    eos = int(free[0, 4])
    ends = [row[1:].tolist().index(eos) if eos in row[1:] else None for row in free]
    assert len(set(ends)) > 2, f"rows should end at different steps, not {ends}"
    return src, mask, eos


def both(t5_pair, batch, seed: int = 3, tokenizer=None, **options):
    """(HF's output, ours) for the same options, each call after torch.manual_seed(seed)."""
    reference, ours = t5_pair
    src, mask, eos = batch
    options = dict(max_new_tokens=12, eos_token_id=eos, return_dict_in_generate=True, output_scores=True, **options)
    extra = dict(tokenizer=tokenizer) if tokenizer is not None else {}
    torch.manual_seed(seed)
    expected = reference.generate(input_ids=src, attention_mask=mask, **options, **extra)
    torch.manual_seed(seed)
    return expected, encdec.generate(ours, src, mask, **options, **extra)


def assert_same(expected, got) -> None:
    """Sequences equal; every step's scores and the beam scores equal within float tolerance."""
    assert torch.equal(got.sequences, expected.sequences)
    assert len(got.scores) == len(expected.scores)
    for ours, theirs in zip(got.scores, expected.scores):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-4)
    if getattr(expected, "sequences_scores", None) is None:
        assert got.sequences_scores is None
    else:
        torch.testing.assert_close(got.sequences_scores, expected.sequences_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", MODES.values(), ids=MODES.keys())
def test_return_dict_with_scores_equals_hugging_face(t5_pair, batch, options):
    expected, got = both(t5_pair, batch, **options)
    assert_same(expected, got)
    beams = options.get("num_beams", 1)
    held = 4 * (beams if beams > 1 else options.get("num_return_sequences", 1))  # the rows the search holds
    assert got.scores[0].shape == (held, 99)


def test_the_default_return_is_the_token_tensor(t5_pair, batch):
    _, ours = t5_pair
    src, mask, _ = batch
    out = encdec.generate(ours, src, mask, max_new_tokens=4, return_dict_in_generate=True)
    assert out.scores is None and out.sequences_scores is None
    assert torch.equal(encdec.generate(ours, src, mask, max_new_tokens=4), out.sequences)


@pytest.mark.parametrize("options", PROCESSORS.values(), ids=PROCESSORS.keys())
def test_each_processor_equals_hugging_face_and_changes_the_scores(t5_pair, batch, options):
    expected, got = both(t5_pair, batch, **options)
    assert_same(expected, got)
    baseline = {k: v for k, v in options.items() if k in ("do_sample", "num_beams", "top_k", "temperature")}
    _, plain = both(t5_pair, batch, **baseline)
    assert not all(torch.equal(a, b) for a, b in zip(got.scores, plain.scores)), "the option should do something"


@pytest.mark.parametrize("options", PREFIX_MODES.values(), ids=PREFIX_MODES.keys())
def test_a_decoder_prefix_is_continued_as_hugging_face_continues_it(t5_pair, batch, options):
    prefix = torch.tensor([[0, 5, 6], [0, 7, 8], [0, 9, 9], [0, 11, 12]])
    expected, got = both(t5_pair, batch, decoder_input_ids=prefix, **options)
    assert_same(expected, got)
    rows = options.get("num_return_sequences", 1)
    assert torch.equal(got.sequences[:, :3], prefix.repeat_interleave(rows, dim=0))


def test_a_prefix_without_the_start_token_gets_it_first(t5_pair, batch):
    expected, got = both(t5_pair, batch, decoder_input_ids=torch.tensor([[5, 6]] * 4), num_beams=2)
    assert_same(expected, got)
    assert (got.sequences[:, :3] == torch.tensor([0, 5, 6])).all()


# --- stop strings ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def word_pair(tmp_path_factory):
    """A tokenizer whose tokens all decode to text, and a random T5 over its vocabulary."""
    tokenizer = word_piece_tokenizer(("stop", "##op", "st", "to", "##pped", "once"))
    vocab = len(tokenizer.get_vocab())
    reference, ours = hf_t5_pair(tmp_path_factory.mktemp("t5-words"), vocab, seed=1, initializer_factor=2.0)
    return (reference, ours), tokenizer


@pytest.mark.parametrize("options", MODES.values(), ids=MODES.keys())
def test_stop_strings_equal_hugging_face(word_pair, options):
    pair, tokenizer = word_pair
    _, ours = pair
    torch.manual_seed(1)
    src = torch.randint(3, len(tokenizer.get_vocab()), (4, 12))
    mask = torch.ones_like(src)
    free = encdec.generate(ours, src, mask, max_new_tokens=12, eos_token_id=1, suppress_tokens=[0, 2])
    texts = token_texts(tokenizer, None)
    stop = texts[int(free[0, 2])] + texts[int(free[0, 3])]  # spans the second and third new tokens of row 0
    expected, got = both(
        pair, (src, mask, 1), tokenizer=tokenizer, stop_strings=[stop, "zz"], suppress_tokens=[0, 2], **options
    )
    assert_same(expected, got)
    if options == MODES["greedy"]:
        assert (got.sequences[0, 4:] == 0).all(), "row 0 should stop after the stop string"


def test_stop_strings_need_the_tokenizer(t5_pair, batch):
    _, ours = t5_pair
    src, mask, _ = batch
    with pytest.raises(ConfigError, match="stop_strings needs the tokenizer"):
        encdec.generate(ours, src, mask, stop_strings="x")


def test_stop_strings_match_across_tokens_only_where_they_end_in_the_last_one():
    """Hugging Face's examples: for "stop", st|op, st|opera, sto|pper, las|topper and s|to|pped match."""
    texts = dict(enumerate(["st", "op", "stop", "opera", "sto", "pper", "las", "topper", "s", "to", "pped", "at", ""]))
    match = StopStrings(["stop"], texts)
    rows = {
        (0, 1): True,
        (0, 3): True,
        (4, 5): True,
        (6, 7): True,
        (8, 9, 10): True,
        (2,): True,
        (8, 12, 9, 10): True,
        (2, 11): False,
        (0, 1, 11): False,
        (0, 3, 11): False,
        (1, 0): False,
        (9, 10): False,
    }
    for ids, stops in rows.items():
        assert bool(match(torch.tensor([[5, 5, 5, *ids]]))) == stops, ids


def test_the_stop_string_matcher_equals_hugging_face_criteria_on_random_rows():
    tokenizer = word_piece_tokenizer(("stop", "##op", "st", "to", "##pped", "once"))
    stops = ["st", "top", "pped", "b", "onc"]
    ours, theirs = stop_strings_for(stops, tokenizer), StopStringCriteria(tokenizer, stops)
    torch.manual_seed(0)
    for width in (1, 2, 5):
        rows = torch.randint(0, len(tokenizer.get_vocab()), (3000, width))
        assert torch.equal(ours(rows), theirs(rows, None))
        assert ours(rows).any()


# --- group (diverse) beam search: transformers 5 no longer ships it, so invariants of HF 4.x's algorithm ----


GROUPS = dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.5)


def test_the_first_group_searches_exactly_as_plain_beam_search(t5_pair, batch):
    """Group 0 is never penalised, so its hypotheses are those of beam search with its n beams."""
    _, ours = t5_pair
    src, mask, eos = batch
    grouped = encdec.generate(
        ours,
        src,
        mask,
        **GROUPS,
        max_new_tokens=10,
        num_return_sequences=4,
        eos_token_id=eos,
        return_dict_in_generate=True,
        output_scores=True,
    )
    plain = encdec.generate(
        ours,
        src,
        mask,
        max_new_tokens=10,
        num_beams=2,
        num_return_sequences=2,
        eos_token_id=eos,
        return_dict_in_generate=True,
        output_scores=True,
    )

    def upto_eos(row: torch.Tensor) -> tuple[int, ...]:
        tokens = row.tolist()
        return tuple(tokens[: tokens.index(eos, 1) + 1] if eos in tokens[1:] else tokens)

    for b in range(4):
        group_rows = list(zip(grouped.sequences[4 * b : 4 * b + 4], grouped.sequences_scores[4 * b : 4 * b + 4]))
        for row, score in zip(plain.sequences[2 * b : 2 * b + 2], plain.sequences_scores[2 * b : 2 * b + 2]):
            assert any(upto_eos(row) == upto_eos(other) and torch.isclose(score, s) for other, s in group_rows)
    assert any(eos in row[1:].tolist() for row in grouped.sequences), "the test should exercise EOS"


def test_the_diversity_penalty_is_the_hamming_count_of_earlier_groups_choices(t5_pair, batch):
    """With one beam per group, at the first step every beam sees the same log-probabilities; group g's lose
    penalty * (how many of groups 0..g-1 continued with each token). A large penalty makes them all differ."""
    _, ours = t5_pair
    src, mask, eos = batch
    penalty = 0.7
    three = dict(max_new_tokens=4, num_beams=3, num_beam_groups=3, num_return_sequences=3)
    out = encdec.generate(
        ours,
        src,
        mask,
        **three,
        diversity_penalty=penalty,
        eos_token_id=eos,
        return_dict_in_generate=True,
        output_scores=True,
    )
    first = out.scores[0].view(4, 3, -1)  # (B, G, V)
    for b in range(4):
        counts = torch.zeros(first.shape[-1])
        for g in range(3):
            torch.testing.assert_close(first[b, g], first[b, 0] - penalty * counts)
            counts[first[b, g].index_fill(0, torch.tensor([eos]), -torch.inf).argmax()] += 1  # its beam's token
    apart = encdec.generate(ours, src, mask, **three, diversity_penalty=100.0, eos_token_id=[])
    assert all(len(set(apart[3 * b : 3 * b + 3, 1].tolist())) == 3 for b in range(4))


def test_group_beam_search_with_a_prefix_keeps_it(t5_pair, batch):
    _, ours = t5_pair
    src, mask, eos = batch
    prefix = torch.tensor([[0, 5]] * 4)
    out = encdec.generate(ours, src, mask, **GROUPS, eos_token_id=eos, decoder_input_ids=prefix, num_return_sequences=2)
    assert (out[:, :2] == torch.tensor([0, 5])).all()


def test_group_beams_and_stop_strings_stay_on_the_device_and_sync_once_per_step(device):
    """No host sync inside a step: one stop test per step, plus the output width once."""
    tokenizer = word_piece_tokenizer()
    with DeviceCheck() as check:
        model = tiny("t5").to(device)
        src, mask = padded_batch()
        src, mask = src.to(device), mask.to(device)
        for options, search in [
            (dict(GROUPS, num_return_sequences=2), "group_beam_search.py"),
            (dict(num_beams=3, stop_strings=["ab", "c"]), "beam_search.py"),
            (dict(stop_strings=["ab", "c"]), "search.py"),
        ]:
            check.syncs.clear()
            encdec.generate(model, src, mask, max_new_tokens=10, eos_token_id=1, tokenizer=tokenizer, **options)
            places = [sync.where.split(":")[0] for sync in check.syncs]
            assert sum(place.endswith("generation/" + search) for place in places) <= 11, places
            assert set(places) <= {"generation/" + search, "generation/generate.py"}, places
    assert check.errors == []
