"""FLOPs and GPU hours of the configs in configs/seeds/rot5, estimated with encdec's own objectives and
its trainer's FLOP count (training/flops.py: the count the logged MFU divides), on documents whose lengths
come from the local TinyStories sample (the real corpora are not on this machine), shifted so their mean
is ROT5's tokens per record. Run from the repository root:
    OMP_NUM_THREADS=1 python docs/scripts/rot5_paper_cost.py [docs/img/rot5_paper_cost.png]

With a path, it also draws the pretraining runs' estimated hours on one H100 or H200 (bars at 35% MFU,
whiskers from 40% to 25%).
"""

import gzip
import re
import sys
from pathlib import Path

import numpy as np

from encdec.data.documents import Documents
from encdec.data.objectives import PairTemplate, build_objective, tokenize_pairs
from encdec.runs.model_section import build_model_config
from encdec.tokenizers import build_tokenizer
from encdec.training.flops import step_flops
from encdec.training.run_config import load_config

PEAK = 989e12  # H100 SXM and H200, dense bf16 (training/flops.py's PEAK_TFLOPS)
MFUS = (0.40, 0.35, 0.25)
DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SAMPLE = DATA / "tinystories" / "tinystories_train_head.txt.gz"
MISTRAL = str(DATA / "tokenizers" / "mistral_tokenizer.model.v1")
TINYSTORIES_MEAN = 494_907_437 / 2_119_719  # ROT5's Mistral tokens per story
INSTRUCT_MEAN = 684_805_492 / 2_476_533  # ... per Instruct record
SAMPLED_BATCHES = 24

tok = build_tokenizer("sentencepiece", MISTRAL, num_sentinels=500)
with gzip.open(SAMPLE, "rt", encoding="utf-8") as handle:
    stories = [s.strip() for s in handle.read().split("<|endoftext|>") if s.strip()]
ids = tok.encode(stories, add_eos=True)
sample_mean = np.mean([len(x) for x in ids])
print(f"sample: {len(ids)} stories, {sample_mean:.1f} tokens (EOS included) a story")


def shifted(target_mean: float) -> Documents:
    """The sample's stories, each lengthened or shortened by one shared amount so the mean is `target_mean`."""
    shift = int(round(target_mean - sample_mean))
    filler = tok.encode(["Summary"])[0][0]
    docs = [[filler] * shift + x if shift >= 0 else x[-shift:] for x in ids]
    return Documents.from_lists(docs, np.uint32)


def per_step(cfg, objective, micro: int, accum: int) -> tuple[float, float, float]:
    """(padded FLOPs, unpadded FLOPs, tokens) of one optimizer step, averaged over sampled micro-batches."""
    padded, useful, tokens = [], [], []
    for step in range(SAMPLED_BATCHES):
        batch = objective.batch_at(0, step % len(objective.plan.batches(objective.seed, 0)))
        rows, src_len = batch.src_ids.shape
        tgt_len = batch.tgt_ids.shape[1]
        padded.append(step_flops(cfg, rows, src_len, tgt_len))
        src = batch.src_mask.sum(1).tolist()
        tgt = (batch.labels != -100).sum(1).tolist()
        useful.append(sum(step_flops(cfg, 1, s, t) for s, t in zip(src, tgt)))
        tokens.append(sum(src) + sum(tgt))
    return accum * np.mean(padded), accum * np.mean(useful), accum * np.mean(tokens)


HOURS: dict[str, list[float]] = {}  # config -> hours at MFUS, the configs' own layout


def report(name: str, path: str, corpus_tokens: float, documents=None, pairs=None, pack=None) -> None:
    run = load_config(path, [f"objective.pack={str(pack).lower()}"] if pack is not None else [])
    cfg = build_model_config(run.model, tok.vocab_size, tok.pad_id, tok.eos_id, tok.decoder_start_id)
    t, o = run.training, run.objective
    if pairs is None:
        objective = build_objective("ul2", documents, tok, t.batch_size, seed=0, seq_len=o.seq_len, pack=o.pack)
    else:
        objective = build_objective(
            "seq2seq",
            pairs,
            tok,
            t.batch_size,
            seed=0,
            max_source_len=o.max_source_len,
            max_target_len=o.max_target_len,
        )
    padded, useful, tokens = per_step(cfg, objective, t.batch_size, t.grad_accum)
    total_padded, total_useful = padded * t.steps, useful * t.steps
    hours = [total_padded / (m * PEAK) / 3600 for m in MFUS]
    if pack is None:
        HOURS[name] = hours
    print(
        f"{name}{' (pack ' + str(o.pack) + ')'}: steps {t.steps:,} x {t.batch_size * t.grad_accum:,} examples; "
        f"tokens/step (src+tgt, no padding) {tokens:,.0f}; corpus tokens {corpus_tokens:.3e}; "
        f"matmul FLOPs padded {total_padded:.3e}, unpadded {total_useful:.3e} (padding x{padded / useful:.2f}); "
        f"hours at MFU {', '.join(f'{m:.0%}: {h:.2f}' for m, h in zip(MFUS, hours))}"
    )


instruct = shifted(INSTRUCT_MEAN)
plain = shifted(TINYSTORIES_MEAN)
root = "configs/seeds/rot5/"
report("rot5_mini_pretrain", root + "rot5_mini_pretrain.yaml", 2 * 684_805_492, documents=instruct)
report("rot5_mini_moe8_pretrain", root + "rot5_mini_moe8_pretrain.yaml", 2 * 684_805_492, documents=instruct)
report("rot5_base_pretrain", root + "rot5_base_pretrain.yaml", 494_907_437, documents=plain)
report("rot5_base_moe8_pretrain", root + "rot5_base_moe8_pretrain.yaml", 494_907_437, documents=plain)
for other in (True, False):  # the configs' choice was printed above; the other layout for comparison
    report("rot5_mini_pretrain", root + "rot5_mini_pretrain.yaml", 2 * 684_805_492, documents=instruct, pack=other)
    report("rot5_base_pretrain", root + "rot5_base_pretrain.yaml", 494_907_437, documents=plain, pack=other)
# fine-tuning: the sample's stories as sources, their first two sentences as stand-in summaries
summaries = [" ".join(re.split(r"(?<=[.!?])\s+", s)[:2]) for s in stories]
template = PairTemplate("Story: {source}\nSummary:", "{target}")
pairs = tokenize_pairs(tok, list(zip(stories, summaries)), template)
print(f"fine-tuning pairs: source {pairs[0].lengths.mean():.1f}, target {pairs[1].lengths.mean():.1f} tokens")
report(
    "rot5_mini_summarize",
    root + "rot5_mini_summarize.yaml",
    1e6 * (pairs[0].lengths.mean() + pairs[1].lengths.mean() + 1),
    pairs=pairs,
)


if len(sys.argv) > 1:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in HOURS if n.endswith("pretrain")]
    mid = [HOURS[n][1] for n in names]
    low = [HOURS[n][1] - HOURS[n][0] for n in names]
    high = [HOURS[n][2] - HOURS[n][1] for n in names]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.barh(names, mid, xerr=[low, high], color="#4c72b0", capsize=4)
    ax.set_xlabel("hours on one H100 or H200 at 35% MFU (whiskers: 40% to 25%)")
    ax.set_title("ROT5 at the paper's sizes: estimated, not measured", fontsize=10)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=120)
    print(f"plot: {sys.argv[1]}")
