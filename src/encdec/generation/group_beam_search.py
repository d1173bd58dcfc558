"""Diverse (group) beam search, as Hugging Face implemented it (Vijayakumar et al. 2016, "Diverse Beam Search").

The N beams of each example form G groups of n = N / G. Every step the groups choose in
turn: group g's log-probabilities lose `diversity_penalty` for each time an earlier group
chose the token at this step (Hamming diversity), then the group runs one step of
ordinary beam search over its own n beams: of its K = max(2, 1 + #EOS) * n best
candidates, those among the top n that end in EOS join the group's n best finished
hypotheses, scored sum(log p) / generated_length ** length_penalty, and the first n
that do not continue. A group stops once it holds n hypotheses and (early_stopping)
cannot improve; the search stops when every group has, or at the maximal length. The
best num_return_sequences hypotheses over all groups are returned.

Transformers 5 no longer ships this search (it moved to the Hub repository
transformers-community/group-beam-search); this follows that code and the 4.x
BeamSearchScorer it uses, vectorised over the batch: the diversity penalty comes after
every other processor, hypotheses are stored without their EOS and written back with
the first EOS id, and a finished group's rows receive the pad token. (Hugging Face
also moves a finished group's rows to the first example's; their scores are
meaningless either way, and here they stay where they are.)

Shapes: B examples, G groups, n beams per group, N = G * n, K candidates per group,
P decoder prompt, L maximal length (prompt included), V vocabulary.
"""

import torch

from encdec.generation.beam_search import NEG, gather_beams
from encdec.generation.config import GenerationConfig
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.interface import SearchState, Steppable, model_device, prompt_logits
from encdec.generation.logits_processors import apply_all, build_processors


class Hypotheses:
    """The n best finished hypotheses of every (example, group): tokens before EOS, their length and score."""

    def __init__(self, running: torch.Tensor):
        B, G, n, _ = running.shape
        self.tokens = running.clone()  # (B, G, n, L)
        self.scores = torch.full((B, G, n), NEG, device=running.device)  # NEG marks an empty slot
        self.lengths = torch.zeros(B, G, n, dtype=torch.long, device=running.device)
        self.filled = torch.zeros(B, G, n, dtype=torch.bool, device=running.device)

    def add(self, g: int, tokens: torch.Tensor, scores: torch.Tensor, length: int, new: torch.Tensor) -> None:
        """Offer group g candidates tokens (B, M, L) with normalised scores (B, M) where `new` (B, M):
        the n best of the old and the offered stay, as BeamHypotheses.add keeps them."""
        n = self.scores.shape[2]
        offered = torch.where(new, scores, NEG)
        pool = torch.cat((self.scores[:, g], offered), dim=1)  # (B, n + M)
        best = torch.topk(pool, n)[1]  # (B, n)
        lengths = torch.full_like(new, length, dtype=torch.long)
        self.scores[:, g] = gather_beams(pool, best)
        self.tokens[:, g] = gather_beams(torch.cat((self.tokens[:, g], tokens), 1), best)
        self.lengths[:, g] = gather_beams(torch.cat((self.lengths[:, g], lengths), 1), best)
        self.filled[:, g] = gather_beams(torch.cat((self.filled[:, g], new), 1), best)

    def worst(self, g: int) -> torch.Tensor:
        """(B,) the lowest score among group g's hypotheses."""
        return self.scores[:, g].min(dim=1)[0]


def group_beam_search(
    model: Steppable,
    state: SearchState,
    prompt: torch.Tensor,
    cfg: GenerationConfig,
    device: torch.device | None = None,
) -> GenerateOutput:
    """Decode the examples of `prompt` (B, P) with cfg.num_beams beams in cfg.num_beam_groups groups on
    `device` (default: the model's) -> (B * num_return_sequences, L') token ids and scores."""
    device = device if device is not None else model_device(model)
    (B, P), N, G = prompt.shape, cfg.num_beams, cfg.num_beam_groups
    n, L, lp = N // G, cfg.max_new_tokens + P, cfg.length_penalty
    eos = torch.tensor(cfg.eos_ids, dtype=torch.long, device=device)
    K = max(2, 1 + len(cfg.eos_ids)) * n
    top_n = torch.arange(K, device=device) < n  # only the n best candidates may finish
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else -1  # a pad is set wherever a group can finish
    running = torch.full((B, G, n, L), pad, dtype=torch.long, device=device)
    running[..., :P] = prompt[:, None, None, :]
    running_scores = torch.full((B, G, n), NEG, device=device)
    running_scores[:, :, 0] = 0.0  # one live beam per group at the first step
    hyps = Hypotheses(running)
    done = torch.zeros(B, G, dtype=torch.bool, device=device)
    rows = torch.arange(B * N, device=device).view(B, G, n)  # each beam's row in the model's state
    chain = build_processors(cfg, L, device, prompt_length=P)
    steps: list[torch.Tensor] | None = [] if cfg.output_scores else None

    cur_len = P
    logits = prompt_logits(model, running[..., :P].reshape(B * N, P), state).float()  # (B*N, V)
    while True:
        log_probs = apply_all(chain, running[..., :cur_len].reshape(B * N, cur_len), logits.log_softmax(-1))
        V = log_probs.shape[-1]
        log_probs = log_probs.view(B, G, n, V)
        chosen = torch.zeros(B, V, device=device)  # (B, V): how often earlier groups chose each token this step
        processed, index = [], rows.clone()
        for g in range(G):
            group = log_probs[:, g] - cfg.diversity_penalty * chosen[:, None, :] if g else log_probs[:, g]  # (B, n, V)
            processed.append(group)
            totals = (group + running_scores[:, g, :, None]).view(B, n * V)
            top_scores, top = torch.topk(totals, K)  # (B, K)
            parent, token = top // V, top % V
            candidates = gather_beams(running[:, g], parent)  # (B, K, L)
            is_eos = torch.isin(token, eos)
            was_done = done[:, g, None]  # (B, 1)
            hyps.add(g, candidates, top_scores / ((cur_len + 1 - P) ** lp), cur_len, is_eos & top_n & ~was_done)

            keep = torch.argsort(is_eos.to(torch.uint8), dim=1, stable=True)[:, :n]  # the n best non-EOS, in order
            beams = gather_beams(candidates, keep)  # (B, n, L)
            beams[:, :, cur_len] = gather_beams(token, keep)
            running[:, g] = torch.where(was_done[:, :, None], running[:, g], beams)
            running[:, g, :, cur_len] = torch.where(was_done, pad, running[:, g, :, cur_len])
            running_scores[:, g] = torch.where(was_done, 0.0, gather_beams(top_scores, keep))
            index[:, g] = torch.where(was_done, rows[:, g], rows[:, g, :1] + gather_beams(parent, keep))
            chosen.scatter_add_(1, running[:, g, :, cur_len], torch.ones(B, n, device=device))

            best = top_scores[:, 0] / ((L - P if cfg.early_stopping == "never" and lp > 0 else cur_len + 1 - P) ** lp)
            full = hyps.filled[:, g].all(dim=1)
            can_stop = full if cfg.early_stopping is True else full & (hyps.worst(g) >= best)
            done[:, g] |= can_stop
        if steps is not None:
            steps.append(torch.stack(processed, dim=1).view(B * N, V))
        state.reorder(index.view(-1))
        cur_len += 1
        if cur_len >= L or bool(done.all()):  # the step's one host sync
            break
        logits = model.step(running[..., cur_len - 1].reshape(B * N, 1), state)[:, -1].float()
    return finalize(hyps, running, running_scores, done, cur_len, P, L, cfg, steps)


def finalize(
    hyps: Hypotheses,
    running: torch.Tensor,
    running_scores: torch.Tensor,
    done: torch.Tensor,
    cur_len: int,
    P: int,
    L: int,
    cfg: GenerationConfig,
    steps: list[torch.Tensor] | None,
) -> GenerateOutput:
    """Offer each unfinished group's open beams as hypotheses, then return the best over all groups, each
    followed by the first EOS id where it ended early and padded after it (BeamSearchScorer.finalize)."""
    B, G, n, _ = running.shape
    for g in range(G):
        hyps.add(
            g,
            running[:, g],
            running_scores[:, g] / ((cur_len - P) ** cfg.length_penalty),
            cur_len,
            ~done[:, g, None].expand(B, n),
        )
    R = cfg.num_return_sequences
    scores, best = torch.topk(hyps.scores.view(B, G * n), R)  # (B, R)
    tokens = gather_beams(hyps.tokens.view(B, G * n, -1), best)  # (B, R, L)
    lengths = gather_beams(hyps.lengths.view(B, G * n), best)  # (B, R)
    width = min(int(lengths.max()) + 1, L)  # one sync per call
    column = torch.arange(width, device=tokens.device)
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else -1
    end = cfg.eos_ids[0] if cfg.eos_ids else pad
    tokens = tokens[:, :, :width].masked_fill(column >= lengths[:, :, None], pad)
    tokens = tokens.masked_fill(column == lengths[:, :, None], end)
    return GenerateOutput(
        tokens.reshape(B * R, width),
        tuple(steps) if steps is not None else None,
        scores.reshape(B * R) if steps is not None else None,
    )
