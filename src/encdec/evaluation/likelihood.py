"""Teacher-forced negative log-likelihood over a whole test file: every pair, every document, no sample of batches.

Pairs: each reference given its source, the source cut as generation cuts it (`TextEncoding.text`),
the reference encoded as the model was taught to emit it (`TextEncoding.encode_targets`). An
encoder-decoder reads the source and its decoder is fed the reference shifted right after its
decoder-start token, as training fed it; a causal LM (encdec.models.causal_lm_shared.PromptedLM) reads
source + reference as one stream and is scored on the reference alone, the layout in which it
generates (the prompt's last position predicts the first output token).

Documents (a language-modelling file): each document's tokens and the EOS that closes it are
scored once each, so the total covers the same text whatever the model:

- a causal LM slides a window of its context length L over [EOS] + document + [EOS] (EOS opens
  the document, as the training stream's separator does) with a stride of L // 2: every token
  after the first window is predicted from at least L // 2 tokens before it;
- an encoder-decoder (span-corruption or UL2 pretrained, or a Hugging Face seq2seq model) is
  scored as UL2's S-denoiser (prefix LM) reads a chunk of L tokens, its first half the input and
  the rest the target (Tay et al. 2022, UL2, section 3.1.2): the document is cut into windows of
  W = L // 2 tokens and the decoder predicts each window given the previous one as its source,
  wrapped in the special tokens the model's text encoder puts around an input (`input_prefix`,
  `input_suffix`); the first window's source is the empty input, its special tokens alone (T5's
  encoding of "" is its EOS), or EOS where the encoder adds none.

Shapes: B batch, S source length, T target length, V vocabulary.
"""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from encdec.data.batch import Batch, collate_encoder_decoder
from encdec.data.objectives.collate import collate_prefix_lm
from encdec.evaluation.encoding import TextEncoding
from encdec.models.causal_lm_shared import PromptedLM
from encdec.models.loss import cross_entropy

MAX_LOGITS = 1 << 27  # logits of one forward (rows x length x vocabulary): 512 MiB in fp32
ENCODE_AT_ONCE = 256  # texts given to a tokenizer at a time

Example = tuple[np.ndarray, np.ndarray]  # (source or prefix ids, target ids), int64


@dataclass
class NLL:
    """Summed cross-entropy (nats) over the scored tokens."""

    total: float
    tokens: int
    cut: int = 0  # references cut to the model's position table

    @property
    def mean(self) -> float:
        return self.total / self.tokens if self.tokens else float("nan")


def is_causal(model: nn.Module) -> bool:
    """Whether the model reads one token stream (decoder-only and the seeds' causal encoder-decoders)."""
    return isinstance(model, PromptedLM)


def position_limit(model: nn.Module) -> int | None:
    """The most positions the model reads: a causal LM's context (max_positions, whatever its position
    scheme), an absolute position table's size; None for an encoder-decoder with relative positions or RoPE."""
    cfg = model.config
    return cfg.positions.max if is_causal(model) or cfg.positions.kind in ("sinusoidal", "learned") else None


def chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def encoded_sources(encoding: TextEncoding, sources: list[str]) -> list[list[int]]:
    """Each source as the model's text encoder gives it to generation (template, cut, special tokens)."""
    rows = []
    for batch in chunks(sources, ENCODE_AT_ONCE):
        encoded = encoding.encode_sources(list(batch))
        ids, mask = encoded["input_ids"], encoded["attention_mask"].bool()
        rows += [row[keep].tolist() for row, keep in zip(ids, mask)]  # padding dropped, on either side
    return rows


def encoded_targets(encoding: TextEncoding, targets: list[str]) -> list[list[int]]:
    return [ids for batch in chunks(targets, ENCODE_AT_ONCE) for ids in encoding.encode_targets(list(batch))]


def pair_examples(
    model: nn.Module, encoding: TextEncoding, pairs: list[tuple[str, str]]
) -> tuple[list[Example], list[bool]]:
    """(source, reference) ids of every pair, and for each whether its reference was cut to fit the positions."""
    sources = encoded_sources(encoding, [s for s, _ in pairs])
    targets = encoded_targets(encoding, [t for _, t in pairs])
    limit, cut, examples = position_limit(model), [], []
    for source, target in zip(sources, targets):
        if is_causal(model):  # one stream of source + target: its inputs are all but its last token
            source = source[-limit:]
            room = limit + 1 - len(source)
        else:
            room = limit if limit is not None else len(target)
        cut.append(len(target) > room)
        examples.append((np.array(source, dtype=np.int64), np.array(target[:room], dtype=np.int64)))
    return examples, cut


def causal_windows(tokens: list[int], length: int) -> Iterator[Example]:
    """(prefix, target) windows of `tokens` (starting with its opening EOS) for a causal LM of context
    `length`: each window is at most `length` + 1 tokens, the stride is length // 2, and every token but
    the first is a target exactly once."""
    stride, begin, scored = max(length // 2, 1), 0, 0  # scored: index of the last token predicted so far
    while scored < len(tokens) - 1:
        end = min(begin + length, len(tokens) - 1)  # inputs tokens[begin:end] predict tokens[begin + 1 : end + 1]
        yield (
            np.array(tokens[begin : scored + 1], dtype=np.int64),
            np.array(tokens[scored + 1 : end + 1], dtype=np.int64),
        )
        scored, begin = end, begin + stride


def denoiser_windows(tokens: list[int], length: int, encoding: TextEncoding, eos_id: int) -> Iterator[Example]:
    """(source, target) windows of `tokens` for an encoder-decoder: windows of length // 2 tokens, each the
    target of the one before it as source (the first: the empty input)."""
    width = max(length // 2, 1)
    for start in range(0, len(tokens), width):
        previous = tokens[max(start - width, 0) : start]  # empty for the first window
        source = [*encoding.input_prefix, *previous, *encoding.input_suffix] or [eos_id]
        yield np.array(source, dtype=np.int64), np.array(tokens[start : start + width], dtype=np.int64)


def document_examples(model: nn.Module, encoding: TextEncoding, documents: list[str]) -> tuple[list[Example], int]:
    """The windows of every document (see the module's docstring), and the tokens they score."""
    eos, limit = model.config.eos_id, position_limit(model)
    length = min(encoding.source_length, limit) if limit is not None else encoding.source_length
    examples, tokens = [], 0
    for batch in chunks(documents, ENCODE_AT_ONCE):
        for ids in encoding.encode_documents(list(batch)):
            ids = [*ids, eos]
            tokens += len(ids)
            if is_causal(model):
                examples += causal_windows([eos, *ids], length)
            else:
                examples += denoiser_windows(ids, length, encoding, eos)
    return examples, tokens


def batches(examples: list[Example], batch_size: int, vocab_size: int) -> Iterator[list[Example]]:
    """Examples sorted by length and grouped `batch_size` at a time, fewer where their logits would pass
    MAX_LOGITS (the order changes no sum)."""
    for group in batch_indices(examples, batch_size, vocab_size):
        yield [examples[i] for i in group]


def batch_indices(examples: list[Example], batch_size: int, vocab_size: int) -> Iterator[list[int]]:
    """The indices of `batches`' groups: the examples sorted by length, `batch_size` at a time, fewer where
    their logits would pass MAX_LOGITS."""
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i][0]) + len(examples[i][1]), len(examples[i][1])))
    batch: list[int] = []
    for i in order:
        width = len(examples[i][0]) + len(examples[i][1])  # a bound on the longer side of the batch
        if batch and (len(batch) >= batch_size or (len(batch) + 1) * width * vocab_size > MAX_LOGITS):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def collate(model: nn.Module, decoder_start: int | None = None) -> Callable[[list[Example]], Batch]:
    """The batch layout the model takes: one stream for a causal LM, source and target otherwise, the decoder
    started from `decoder_start` (None: the model's decoder_start_id)."""
    cfg = model.config
    if is_causal(model):
        return lambda examples: collate_prefix_lm(examples, cfg.pad_id)
    start = cfg.decoder_start_id if decoder_start is None else decoder_start
    return lambda examples: collate_encoder_decoder(examples, cfg.pad_id, start)


@torch.no_grad()
def total_nll(
    model: nn.Module,
    examples: list[Example],
    batch_size: int,
    device: torch.device,
    progress: bool = False,
    decoder_start: int | None = None,
) -> tuple[float, int]:
    """Summed cross-entropy of the examples' targets under teacher forcing (the decoder started from
    `decoder_start`, None: the model's), and the tokens scored."""
    model.eval()
    make = collate(model, decoder_start)
    total, tokens = torch.zeros((), device=device), 0
    groups = list(batches(examples, batch_size, model.config.vocab_size))
    for group in tqdm(groups, desc="loss", unit="batch", leave=False, disable=not progress):
        batch = make(group)
        local = batch.to(device)
        out = model(local.src_ids, local.tgt_ids, src_mask=local.src_mask)  # src_ids None for a causal LM
        total += cross_entropy(out.logits, local.labels) * batch.num_tokens
        tokens += batch.num_tokens
    return total.item(), tokens  # one host sync, at the end


def file_nll(
    model: nn.Module,
    encoding: TextEncoding,
    items: list[tuple[str, str]] | list[str],
    batch_size: int,
    device: torch.device,
    progress: bool = False,
) -> NLL:
    """The NLL of a test file's items: of every pair's reference given its source (pairs), or of every token
    of every document, each document's closing EOS included (texts)."""
    if items and isinstance(items[0], tuple):
        (examples, cuts), expected = pair_examples(model, encoding, items), None
        cut = sum(cuts)
    else:
        (examples, expected), cut = document_examples(model, encoding, items), 0
    total, tokens = total_nll(model, examples, batch_size, device, progress, encoding.decoder_start)
    assert expected is None or tokens == expected, f"{tokens} tokens scored, {expected} in the documents"  # each once
    return NLL(total, tokens, cut)
