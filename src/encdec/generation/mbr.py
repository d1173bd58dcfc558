"""Minimum Bayes risk decoding: draw N samples of each input, keep the one with the highest mean utility against
the others (Eikema and Aziz 2020, section 5; Freitag et al. 2022, with chrF and BLEU as utilities).

    generate(model, src_ids, src_mask, do_sample=True, mbr=8, mbr_decode=texts_of_rows)   # seed= to repeat it

The samples are `sample_search`'s (the request's temperature, top_p and other processors; its seed), N rows an
example. Each candidate i is scored by its mean utility against the other N - 1 taken as references,
u(i) = mean_{j != i} metric(text_i, [text_j]), with sacrebleu's sentence chrF (the default) or BLEU (with
effective order, as sentence BLEU needs); the num_return_sequences best of each example are kept, best first,
the earlier sample first where two tie, so one seed gives one choice. The utility compares texts, and
generation knows no tokenizer: the option `mbr_decode` turns token rows into texts (TextGenerator, which
`encdec generate`, `evaluate` and the server generate through, gives its text encoder's decoding).

Shapes: B examples, N samples an example, R = B * N rows, L output length.
"""

import torch

from encdec.errors import ConfigError
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.search import sample_search

DEFAULT_METRIC = "chrf"


def metric_named(name: str):
    """sacrebleu's sentence scorer `name` (imported here: plain generation never loads sacrebleu)."""
    from sacrebleu.metrics import BLEU, CHRF

    return CHRF() if name == "chrf" else BLEU(effective_order=True)


def check_mbr(cfg) -> None:
    """MBR's texts need a decoding: one sentence where `cfg` (a GenerationConfig asking for mbr) has no function
    for it."""
    if cfg.mbr is not None and not callable(cfg.mbr_decode):
        raise ConfigError(
            "mbr compares texts: give mbr_decode (token rows -> texts), or generate through "
            "encdec.generation.text_generator.TextGenerator, which decodes with the model's tokenizer"
        )


def expected_utilities(texts: list[str], metric: str = DEFAULT_METRIC) -> list[float]:
    """Each text's mean sentence score (0-100) under `metric` against every other text as its reference; a
    pair of texts is scored once however often it recurs."""
    scorer, seen = metric_named(metric), {}

    def utility(hypothesis: str, reference: str) -> float:
        if (hypothesis, reference) not in seen:
            seen[hypothesis, reference] = scorer.sentence_score(hypothesis, [reference]).score
        return seen[hypothesis, reference]

    others = max(len(texts) - 1, 1)
    return [sum(utility(t, r) for j, r in enumerate(texts) if j != i) / others for i, t in enumerate(texts)]


def consensus(texts: list[str], keep: int = 1, metric: str = DEFAULT_METRIC) -> list[int]:
    """The indices of the `keep` texts of highest expected utility, best first (the earlier first on a tie)."""
    utilities = expected_utilities(texts, metric)
    return sorted(range(len(texts)), key=lambda i: (-utilities[i], i))[:keep]


def mbr_search(stepper, state, job) -> GenerateOutput:
    """MBR over `job` (generate's Prepared, job.rows = N samples an example) -> (B * num_return_sequences, L')
    token ids, cut after the longest kept row's EOS; with output_scores, the kept rows' scores."""
    cfg = job.cfg
    check_mbr(cfg)
    prompt = job.prompt.repeat_interleave(job.rows, 0)  # (R, P)
    drawn = sample_search(stepper, state, prompt, cfg, job.device, job.stop)
    texts = cfg.mbr_decode(drawn.sequences)
    n, metric = job.rows, cfg.mbr_metric or DEFAULT_METRIC
    kept = [
        start + i
        for start in range(0, len(texts), n)
        for i in consensus(texts[start : start + n], cfg.num_return_sequences, metric)
    ]
    index = torch.tensor(kept, device=drawn.sequences.device)
    sequences = drawn.sequences.index_select(0, index)
    length = kept_length(sequences, prompt.shape[1], cfg.eos_ids)
    scores = None if drawn.scores is None else tuple(s.index_select(0, index) for s in drawn.scores)
    return GenerateOutput(sequences[:, :length], scores[: length - prompt.shape[1]] if scores else scores)


def kept_length(sequences: torch.Tensor, prompt_length: int, eos_ids: list[int]) -> int:
    """The columns of `sequences` (R, L) up to the latest first EOS of a row (all of them where a row has none)."""
    new = sequences[:, prompt_length:]
    if not eos_ids or new.shape[1] == 0:
        return sequences.shape[1]
    ended = torch.isin(new, torch.tensor(eos_ids, device=new.device))  # (R, L - P)
    ends = torch.where(ended.any(1), ended.int().argmax(1) + 1, new.shape[1])
    return prompt_length + int(ends.max())
