"""Beam search with Hugging Face's exact scoring and stopping rules, vectorised over the batch.

Each step keeps the K = max(2, 1 + #EOS) * N best continuations of every example,
continues the N best that did not finish, and merges those of the top N that
finished into the example's N best finished hypotheses, scored
    sum of log-probabilities / generated_length ** length_penalty
(generated_length counts the tokens after the decoder prompt, EOS included). A
candidate finishes with EOS, at the maximal length, or when a stop string ends it.
`early_stopping`: True stops an example once N hypotheses finished; False stops
when the best running beam, scored at the current length, cannot beat the worst
finished one; "never" scores it at the maximal length when length_penalty > 0.
The cache follows the beams through `state.reorder`, never by re-running. Every
tensor lives on the model's device. On a CPU each step waits for the host once, to
decide whether to stop; on an accelerator only every `sync_interval` steps: the stop
is kept on the device, the finished hypotheses stay as they were from then on, and
the steps the host did not look at are computed and dropped.

Shapes: B examples, N beams, K candidates kept per step, P decoder prompt (the start
token and any prefix), L maximal length (prompt included), V vocabulary.
"""

import torch

from encdec.generation.config import GenerationConfig
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.interface import SearchState, Steppable, model_device, prompt_logits
from encdec.generation.logits_processors import apply_all, build_processors
from encdec.generation.search import StopTest, sync_interval

NEG = -1.0e9  # Hugging Face's "impossible" score; kept identical so ties break identically


def gather_beams(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """tensor (B, M, ...), index (B, M') -> (B, M', ...)."""
    while index.dim() < tensor.dim():
        index = index.unsqueeze(-1)
    return torch.take_along_dim(tensor, index, dim=1)


def beam_search(
    model: Steppable,
    state: SearchState,
    prompt: torch.Tensor,
    cfg: GenerationConfig,
    device: torch.device | None = None,
    stop_test: StopTest | None = None,
) -> GenerateOutput:
    """Decode the examples of `prompt` (B, P), the decoder-start token and any prefix, with cfg.num_beams
    beams on `device` (default: the model's) -> (B * num_return_sequences, L') token ids and scores."""
    device = device if device is not None else model_device(model)
    (B, P), N, lp = prompt.shape, cfg.num_beams, cfg.length_penalty
    L = cfg.max_new_tokens + P
    eos = torch.tensor(cfg.eos_ids, dtype=torch.long, device=device)
    K = max(2, 1 + len(cfg.eos_ids)) * N
    top_n = torch.arange(K, device=device) < N  # only the N best candidates may finish
    fill = cfg.pad_token_id or (cfg.eos_ids[0] if cfg.eos_ids else -1)  # as Hugging Face fills: a pad id 0 gives EOS
    running = torch.full((B, N, L), fill, dtype=torch.long, device=device)
    running[:, :, :P] = prompt[:, None, :]
    finished = running.clone()
    # with output_scores, the row of each step's scores every token was chosen from (Hugging Face's beam_indices)
    origins = torch.full((B, N, L), -1, dtype=torch.long, device=device) if cfg.output_scores else None
    finished_origins = origins.clone() if origins is not None else None
    running_scores = torch.zeros(B, N, device=device)
    running_scores[:, 1:] = NEG  # only the first beam's tokens count at the first step
    finished_scores = torch.full((B, N), NEG, device=device)
    finished_lengths = torch.zeros(B, N, dtype=torch.long, device=device)  # generated tokens of each hypothesis
    is_finished = torch.zeros(B, N, dtype=torch.bool, device=device)
    improvable = torch.ones(B, 1, dtype=torch.bool, device=device)
    example_offset = torch.arange(B, device=device)[:, None] * N  # (B, 1)
    chain = build_processors(cfg, L, device, prompt_length=P)
    generator = cfg.make_generator(device)
    steps: list[torch.Tensor] | None = [] if cfg.output_scores else None
    every = sync_interval(device, cfg)
    stopped = torch.zeros((), dtype=torch.bool, device=device)  # the stop the host has not seen yet

    cur_len = P
    logits = prompt_logits(model, running[:, :, :P].reshape(B * N, P), state).float()  # (B*N, V)
    while True:
        log_probs = apply_all(chain, running[:, :, :cur_len].reshape(B * N, cur_len), logits.log_softmax(-1))
        if steps is not None:
            steps.append(log_probs)
        V = log_probs.shape[-1]
        totals = (log_probs.view(B, N, V) + running_scores[:, :, None]).view(B, N * V)
        if cfg.do_sample:
            index = torch.multinomial(totals.softmax(-1), K, generator=generator)
            top_scores = totals.gather(1, index)
        else:
            top_scores, index = torch.topk(totals, K)  # (B, K)
        parent, token = index // V, index % V
        candidates = gather_beams(running, parent)  # (B, K, L)
        candidates[:, :, cur_len] = token
        if origins is not None:
            candidate_origins = gather_beams(origins, parent)
            candidate_origins[:, :, cur_len] = parent + example_offset
        done = torch.isin(token, eos) | (cur_len + 1 >= L)  # (B, K)
        if stop_test is not None:
            done |= stop_test(candidates[:, :, : cur_len + 1].reshape(B * K, cur_len + 1)).view(B, K)

        # continue the N best candidates that did not finish
        open_scores = top_scores + done.float() * NEG
        keep = torch.topk(open_scores, N)[1]  # (B, N)
        running = gather_beams(candidates, keep)
        if origins is not None:
            origins = gather_beams(candidate_origins, keep)
        running_scores = gather_beams(open_scores, keep)
        state.reorder((gather_beams(parent, keep) + example_offset).view(-1))

        # merge the newly finished among the top N into the N best finished hypotheses
        scores = top_scores / ((cur_len + 1 - P) ** lp)
        scores = scores + (is_finished.all(-1, keepdim=True) & (cfg.early_stopping is True)).float() * NEG
        scores = scores + (~improvable).float() * NEG
        just_finished = done & top_n[None, :]
        scores = scores + (~just_finished) * NEG
        best = torch.topk(torch.cat((finished_scores, scores), 1), N)[1]
        merged = (
            gather_beams(torch.cat((finished, candidates), 1), best),
            gather_beams(torch.cat((finished_scores, scores), 1), best),
            gather_beams(torch.cat((is_finished, just_finished), 1), best),
            gather_beams(torch.cat((finished_lengths, torch.full_like(token, cur_len + 1 - P)), 1), best),
        )
        if origins is not None:
            merged += (gather_beams(torch.cat((finished_origins, candidate_origins), 1), best),)
        if every > 1:  # after a stop the host has not seen, the finished hypotheses stay as they were
            old = (finished, finished_scores, is_finished, finished_lengths, finished_origins)[: len(merged)]
            merged = tuple(torch.where(stopped, before, after) for before, after in zip(old, merged, strict=True))
        finished, finished_scores, is_finished, finished_lengths = merged[:4]
        finished_origins = merged[4] if origins is not None else None

        cur_len += 1
        improvable = still_improvable(improvable, running_scores, finished_scores, is_finished, cur_len - P, L - P, cfg)
        stop = ~improvable.any() | done.all()
        if cfg.early_stopping is True:
            stop |= is_finished.all()
        if every > 1:
            stopped |= stop
            if cur_len >= L or ((cur_len - P) % every == 0 and bool(stopped)):  # the sync, every `every` steps
                break  # (at the maximal length every candidate is done: no sync needed)
        elif bool(stop):  # the step's one host sync
            break
        logits = model.step(running[:, :, cur_len - 1].reshape(B * N, 1), state)[:, -1].float()

    R = cfg.num_return_sequences
    length = P + int(finished_lengths[:, :R].max())  # the output's width: one sync per call
    return GenerateOutput(
        finished[:, :R, :length].reshape(B * R, length),
        tuple(steps) if steps is not None else None,
        finished_scores[:, :R].reshape(B * R) if steps is not None else None,
        finished_origins[:, :R, P:length].reshape(B * R, length - P) if finished_origins is not None else None,
    )


def still_improvable(
    improvable: torch.Tensor,
    running_scores: torch.Tensor,
    finished_scores: torch.Tensor,
    is_finished: torch.Tensor,
    generated: int,
    max_generated: int,
    cfg: GenerationConfig,
) -> torch.Tensor:
    """(B, 1): can the best running beam, `generated` tokens past the prompt, still beat the worst finished
    hypothesis? (Hugging Face's heuristic)"""
    lp = cfg.length_penalty
    best_length = max_generated if cfg.early_stopping == "never" and lp > 0.0 else generated
    best_running = running_scores[:, :1] / (best_length**lp)
    worst_finished = torch.where(is_finished, finished_scores.min(dim=1, keepdim=True)[0], NEG)
    return improvable & (best_running > worst_finished).any(dim=-1, keepdim=True)
