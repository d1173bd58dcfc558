"""Temperature fallback (Radford et al. 2022, Whisper, 4.5), as transformers' Whisper `generate_with_fallback` runs it.

    generate(model, src_ids, temperature=[0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
             compression_ratio_threshold=1.35, logprob_threshold=-1.0)

Every row is decoded at the first temperature (0: greedy or beam search; above 0: sampling, one beam); a row whose
output compresses too well (zlib, a sign of repetition) or whose average log-probability is too low is decoded
again, alone with the others that failed, at the next temperature, until none fails or the temperatures run out
(the last decoding is kept). With no_speech_threshold (Whisper's rules), a row whose <|nospeech|> probability is
above it and whose log-probability is below logprob_threshold is not decoded again: its output is empty. The
searches are the table's (encdec.generation.strategies), so a fallback decodes as `generate` decodes.

Shapes: B examples, P prompt length, n generated tokens, V vocabulary.
"""

import math
import zlib
from dataclasses import dataclass, replace

import torch

from encdec.errors import ConfigError
from encdec.generation.generate_output import GenerateOutput


def trimmed(row: list[int], pad_id: int | None, eos_id: int | None) -> list[int]:
    """A row's generated tokens without the padding after it (one EOS kept where EOS pads), as transformers'
    Whisper cuts them before it scores a decoding."""
    if row and row[-1] == pad_id:
        paddings = row.count(pad_id) - (1 if pad_id == eos_id else 0)
        row = row[: len(row) - paddings] if paddings else row
    return row


def compression_ratio(tokens: list[int], vocab_size: int) -> float:
    """Bytes of the tokens (each in the fewest bytes the vocabulary needs, little-endian) over their zlib
    compression's, transformers' `_retrieve_compression_ratio`."""
    width = int(math.log2(vocab_size) / 8) + 1
    data = b"".join(token.to_bytes(width, "little") for token in tokens)
    return len(data) / len(zlib.compress(data))


def average_logprob(scores: torch.Tensor, tokens: list[int], temperature: float) -> float:
    """The mean log-probability of `tokens` (EOS included) under the processed `scores` (n, V) of their steps,
    undoing the temperature, transformers' `_retrieve_avg_logprobs` (its sum in its order)."""
    ids = torch.tensor(tokens, dtype=torch.long, device=scores.device)
    scores, ids = (scores[: len(ids)], ids) if scores.shape[0] > len(ids) else (scores, ids[-scores.shape[0] :])
    rescale = temperature if temperature > 0 else 1
    logprobs = (scores * rescale).float().log_softmax(dim=-1).to(scores.dtype)
    chosen = logprobs.gather(-1, ids[:, None])[:, 0].cpu()
    total = chosen[0] if len(chosen) else torch.zeros(())
    for value in chosen[1:]:
        total = total + value
    return float(total / len(tokens))


def scores_of(out: GenerateOutput, j: int) -> torch.Tensor:
    """(n, V) the processed scores row `j` of a search's output chose its tokens from: its own row's at each
    step, or for beam search the row of the beam each token came from (as transformers splits them: an index
    of -1, past the hypothesis's end, reads the last row; the tokens' count cuts those steps off)."""
    if out.beam_indices is None:
        return torch.stack([step[j] for step in out.scores])
    return torch.stack([step[index] for step, index in zip(out.scores, out.beam_indices[j].tolist())])


def no_speech_probs(stepper, job) -> torch.Tensor:
    """(B,) the probability of <|nospeech|> after each row's <|startoftranscript|> (the decoder's start: the
    prompt's first token, or the first after a previous text), from the unprocessed logits, as transformers'
    WhisperNoSpeechDetection reads it: an encoder pass and one step of their own."""
    row = job.prompt[0].tolist()  # every row's prompt has its start token at one place
    at = len(row) - 1 - row[::-1].index(job.cfg.decoder_start_token_id)
    state = stepper.start(job.src_ids, job.src_mask, at + 1, 1)
    logits = stepper.step(job.prompt[:, : at + 1], state)[:, -1]  # (B, V)
    return logits.float().softmax(dim=-1)[:, job.cfg.whisper.no_speech_token_id].cpu()


def check_fallback(cfg, vocab_size: int | None) -> None:
    """What a fallback needs, each missing piece one sentence."""
    if cfg.num_return_sequences > 1:
        raise ConfigError("temperature fallback keeps one output per input: leave num_return_sequences at 1")
    if cfg.logprob_threshold is not None and cfg.num_beam_groups > 1:
        raise ConfigError("logprob_threshold scores greedy, sampled and beam decodings, not diverse beam search")
    if cfg.no_speech_threshold is not None and (cfg.logprob_threshold is None or cfg.whisper is None):
        raise ConfigError("no_speech_threshold needs logprob_threshold and a Whisper's rules (its <|nospeech|>)")
    if cfg.compression_ratio_threshold is not None and vocab_size is None:
        raise ConfigError("compression_ratio_threshold needs the model's vocab_size (its config has none)")


def applies(cfg) -> bool:
    """A list of temperatures, or a threshold (with one temperature it decides only whether a row has speech)."""
    thresholds = (cfg.compression_ratio_threshold, cfg.logprob_threshold, cfg.no_speech_threshold)
    return cfg.temperatures is not None or any(t is not None for t in thresholds)


def temperatures_of(cfg) -> tuple[float, ...]:
    if cfg.temperatures is not None:
        return cfg.temperatures
    return (cfg.temperature,) if cfg.do_sample else (0.0,)


@dataclass(frozen=True)
class Kept:
    """What a row's kept decoding scored: its temperature, its compression ratio (where the model's vocab_size
    is known), and where they were asked for (logprob_threshold, no_speech_threshold) its average log-probability
    and its <|nospeech|> probability; `skipped` where no speech was found (its tokens are then none)."""

    temperature: float
    avg_logprob: float | None = None
    compression_ratio: float | None = None
    no_speech_prob: float | None = None
    skipped: bool = False


def run_fallback(stepper, state, job, strategy_for) -> GenerateOutput:
    """Decode every row of `job` (generate's Prepared) at the first temperature of cfg.temperature, the rows that
    fail again at the next, and so on -> (B, P + n) token ids, each row its last decoding's, padded; each pass
    runs the search `strategy_for(its config)` names."""
    cfg, length = job.cfg, job.prompt.shape[1]
    kept, _ = decode_with_fallback(stepper, state, job, strategy_for)
    width = length + max(len(tokens) for tokens in kept)
    fill = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    sequences = torch.full((len(kept), width), fill, dtype=torch.long, device=job.device)
    sequences[:, :length] = job.prompt
    for row, tokens in enumerate(kept):
        sequences[row, length : length + len(tokens)] = torch.tensor(tokens, dtype=torch.long, device=job.device)
    return GenerateOutput(sequences)


def decode_with_fallback(stepper, state, job, strategy_for) -> tuple[list[list[int]], list[Kept]]:
    """`run_fallback`'s passes -> each row's kept tokens after the prompt (padding cut, EOS kept; none where
    no speech was found) and what its decoding scored (`Kept`). With one temperature and no threshold: one pass."""
    cfg, (batch, length) = job.cfg, job.prompt.shape
    eos = cfg.eos_ids[0] if cfg.eos_ids else None
    no_speech = no_speech_probs(stepper, job) if cfg.no_speech_threshold is not None else None
    generator = cfg.make_generator(job.device)  # one stream for every sampled pass
    scoring = cfg.logprob_threshold is not None
    kept: list[list[int]] = [[] for _ in range(batch)]
    scored: list[Kept] = [Kept(0.0)] * batch
    skipped = [False] * batch  # by place in the pass, as transformers keeps it (see below)
    rows = list(range(batch))
    for k, temperature in enumerate(temperatures_of(cfg)):
        sampling = temperature > 0
        pass_cfg = replace(
            cfg,
            temperature=temperature if sampling else 1.0,
            do_sample=sampling,
            num_beams=1 if sampling else cfg.num_beams,
            seed=None,
            generator=generator,
            return_dict_in_generate=True,
            output_scores=scoring or cfg.output_scores,
            compression_ratio_threshold=None,  # one pass: the search the table has for one temperature
            logprob_threshold=None,
            no_speech_threshold=None,
        )
        index = torch.tensor(rows, device=job.device)
        src_ids, src_mask, prompt = job.src_ids[index], job.src_mask[index], job.prompt[index]
        sub = replace(
            job, cfg=pass_cfg, src_ids=src_ids, src_mask=src_mask, prompt=prompt, rows=pass_cfg.rows_per_example
        )
        if k > 0:
            state = stepper.start(sub.src_ids, sub.src_mask, cfg.max_new_tokens + length - 1, pass_cfg.rows_per_example)
        out = strategy_for(pass_cfg).run(stepper, state, sub)
        failed = []
        for j, (row, tokens) in enumerate(zip(rows, out.sequences[:, length:].tolist())):
            tokens = trimmed(tokens, cfg.pad_token_id, eos)
            again, skip, ratio, logprob = False, False, None, None
            if job.vocab_size is not None:
                ratio = compression_ratio(tokens, job.vocab_size)
                again = cfg.compression_ratio_threshold is not None and ratio > cfg.compression_ratio_threshold
            if scoring:
                logprob = average_logprob(scores_of(out, j), tokens, temperature)
                again = again or logprob < cfg.logprob_threshold
                if no_speech is not None and logprob < cfg.logprob_threshold:
                    skip = bool(no_speech[j] > cfg.no_speech_threshold)
                    again = again and not skip
            # transformers (5.x, generate_with_fallback) indexes two things by the row's place j in this pass,
            # not by the row: the <|nospeech|> probability (its WhisperNoSpeechDetection keeps the first pass's
            # inputs, so j reads the first pass's j-th row) and the skip (read back by row once the passes end).
            # In the first pass, and in any pass where no row is skipped, the two agree; kept so for parity.
            skipped[j] = skip
            kept[row] = tokens
            speech = float(no_speech[row]) if no_speech is not None else None  # the row's own, as reported
            scored[row] = Kept(temperature, logprob, ratio, speech)
            if again:
                failed.append(row)
        rows = failed
        if not rows:
            break
    kept = [[] if skip else tokens for skip, tokens in zip(skipped, kept)]  # no speech: nothing
    return kept, [replace(score, skipped=skip) for skip, score in zip(skipped, scored)]
