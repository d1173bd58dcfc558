"""Served speculative sampling keeps the model's law: many seeded sampling requests through a scheduler's
speculating rows (serving.speculative_rows), their first two tokens counted and tested by chi-square against the
model's exact law, computed from its logits; the same test run on the rows with a wrong acceptance rule (every
draft kept) refuses them, so it can fail."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from test_abandon import HANG

from encdec.generation import speculative_rounds
from encdec.generation.speculative import SpeculativeStats
from encdec.models import build_model, preset
from encdec.serving.scheduler import Scheduler
from encdec.serving.speculative_rows import ServedDraft
from tests.generation.law_kit import chi_square_p_value, two_token_counts, two_token_law

V = 12  # a vocabulary small enough that 144 pairs of tokens are each drawn often
SOURCE = torch.tensor([[3, 4, 5, 6, 7]])
OPTIONS = dict(do_sample=True, temperature=1.0, top_k=8, eos_token_id=[], pad_token_id=0)
DRAWS = 3000  # requests: ~21 draws a pair of tokens the law gives more than 1 / 144
CLIENTS = 48  # requests in flight at once: rows of one round, each with its own seeded generator


@pytest.fixture(scope="module")
def pair():
    """A tiny model and a draft of its vocabulary that reads its encoder output, of other weights: the draft's
    law is far from the model's, so a rule that keeps its drafts shows."""
    torch.manual_seed(0)
    target = build_model(preset("t5-tiny", vocab_size=V, dropout=0.0)).eval()
    torch.manual_seed(1)
    draft = build_model(preset("t5-tiny", vocab_size=V, dropout=0.0, n_decoder_layers=1)).eval()
    return target, draft


def served_draws(target, draft) -> tuple[torch.Tensor, SpeculativeStats]:
    """(DRAWS, 4) the start token and first three tokens of DRAWS seeded sampling requests, served speculatively
    with two drafts a round (a request's first two tokens: two drafts kept, or one and the model's correction, or
    the correction of the first) and the rounds' counts."""
    scheduler = Scheduler(target, max_rows=CLIENTS, draft=ServedDraft(draft, True, 2))
    ask = lambda seed: scheduler.run(SOURCE, None, dict(OPTIONS, max_new_tokens=3, seed=seed))  # noqa: E731
    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            outs = list(pool.map(ask, range(DRAWS), timeout=HANG * 10))
    finally:
        scheduler.stop(timeout=HANG)
    return torch.cat(outs), scheduler.spec.stats


def accept_every_draft(drafts, p_scores, q_scores, cfg, generator):
    """A wrong rule: every draft kept, then a draw from the model's distribution after them."""
    R, n = drafts.shape
    last = torch.multinomial(p_scores[n].softmax(-1), 1, generator=generator)
    return torch.cat((drafts, last), dim=1), torch.full((R,), n, dtype=torch.long, device=drafts.device)


def test_served_speculative_sampling_draws_the_first_two_tokens_as_the_model_samples_them(pair, monkeypatch):
    target, draft = pair
    law = DRAWS * two_token_law(target, SOURCE, OPTIONS)
    draws, stats = served_draws(target, draft)
    assert stats.target_steps > DRAWS and 0.2 < stats.acceptance_rate < 0.8  # drafts kept and rejected
    p_value = chi_square_p_value(two_token_counts(draws, V), law)
    monkeypatch.setattr(speculative_rounds, "verify", accept_every_draft)  # the test tells a wrong rule
    wrong, _ = served_draws(target, draft)
    assert p_value > 1e-3
    assert chi_square_p_value(two_token_counts(wrong, V), law) < 1e-3
