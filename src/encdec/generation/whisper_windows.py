"""Whisper's decoding of a window, as transformers' Whisper `generate` runs it on an input of one window (30 s).

A decoding is cut into segments at each pair of timestamps (<|t_end|><|t_start|>). Where it ends on a lone
timestamp, or holds no pair, the window is done; else the tokens after its last pair are dropped (a segment
cut off mid-sentence) and the window is decoded again from that pair's time: the features from there on,
padded with zeros to the window, the same prompt (transformers' long-form seek, which it runs on short inputs
too). A row's output is its segments' tokens, window after window, EOS and padding cut off, right-padded.

Shapes: B examples, C mel bins, T frames (one window), P prompt length, L output length.
"""

from dataclasses import replace

import torch

from encdec.generation.fallback import trimmed
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.interface import capabilities_of

FRAMES_PER_TIMESTAMP = 2  # a timestamp is 20 ms, a log-mel frame 10 ms (transformers' input_stride)


def split(tokens: list[int], first: int, frames_left: int) -> tuple[list[list[int]], int]:
    """A window's decoding -> its segments' tokens and the frames it moves on, as transformers' `_retrieve_segment`
    cuts it: one segment and the whole window where it holds no pair of timestamps; else a segment up to each
    pair's first timestamp, and the last up to a lone timestamp that ends the decoding (the whole window done)
    or up to its last pair's second timestamp (the output shows the segment was cut), moving to that pair's time."""
    is_time = [token >= first for token in tokens]
    pairs = [i + 1 for i in range(len(tokens) - 1) if is_time[i] and is_time[i + 1]]
    if not pairs:
        return [tokens], frames_left
    if is_time[-2:] == [False, True]:
        ends, moved = [*pairs, len(tokens)], frames_left
    else:
        ends, moved = [*pairs[:-1], pairs[-1] + 1], (tokens[pairs[-1] - 1] - first) * FRAMES_PER_TIMESTAMP
    return [tokens[start:end] for start, end in zip([0, *ends[:-1]], ends)], moved


def segments(tokens: list[int], first: int, frames_left: int) -> tuple[list[int], int]:
    """A window's decoding -> (the tokens kept, the frames it moves on): `split`'s segments end to end."""
    pieces, moved = split(tokens, first, frames_left)
    return [token for piece in pieces for token in piece], moved


def from_frame(
    features: torch.Tensor, starts: list[int], ends: list[int] | None = None, width: int | None = None
) -> torch.Tensor:
    """features (B, C, T) -> (B, C, width): each row's frames from its start on (up to its end: default the
    last), zeros after them; width T unless given (long-form transcription's window of a longer recording)."""
    T = features.shape[-1]
    out = features.new_zeros(*features.shape[:2], width or T)
    for row, start in enumerate(starts):
        end = ends[row] if ends is not None else T
        out[row, :, : end - start] = features[row, :, start:end]
    return out


def transcribe(stepper, job, strategy_for) -> GenerateOutput:
    """Decode `job`'s rows (generate's Prepared, with Whisper's rules), window after window where a decoding
    stops mid-segment, each decoding the search `strategy_for(cfg)` names -> (B, L) the tokens after the prompt.
    A model that reads token ids rather than features has no window to move in: one decoding."""
    cfg, (batch, length) = job.cfg, job.prompt.shape
    eos = cfg.eos_ids[0] if cfg.eos_ids else None
    first = cfg.whisper.timestamp_begin
    frames = job.src_ids.shape[-1] if capabilities_of(stepper).reads_features else 0
    seek, kept = [0] * batch, [[] for _ in range(batch)]
    rows = list(range(batch))
    while rows:
        index = torch.tensor(rows, device=job.device)
        src_ids, src_mask, prompt = job.src_ids[index], job.src_mask[index], job.prompt[index]
        if any(seek[row] for row in rows):
            src_ids = from_frame(src_ids, [seek[row] for row in rows])
        window = replace(job, src_ids=src_ids, src_mask=src_mask, prompt=prompt)
        state = stepper.start(src_ids, src_mask, cfg.max_new_tokens + length - 1, job.rows)
        out = strategy_for(cfg).run(stepper, state, window)
        for row, tokens in zip(rows, out.sequences[:, length:].tolist()):
            tokens = trimmed(tokens, cfg.pad_token_id, eos)
            tokens = tokens[:-1] if tokens and tokens[-1] == eos else tokens
            tokens, moved = segments(tokens, first, frames - seek[row])
            kept[row] += tokens
            seek[row] += moved
        rows = [row for row in rows if seek[row] < frames]
    width = max(len(tokens) for tokens in kept)
    sequences = torch.full((batch, width), cfg.pad_token_id, dtype=torch.long)
    for row, tokens in enumerate(kept):
        sequences[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return GenerateOutput(sequences.to(job.device))
