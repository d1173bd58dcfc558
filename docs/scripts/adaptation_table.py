"""Issue 47's experiment (docs/experiments.md, "From decoder-only to encoder-decoder"): the prefix-conditional loss
of each run of configs/experiments/adapt_cpu.yaml, its DialogSum ROUGE-L after fine-tuning
(adapt_dialogsum_cpu.yaml, scored by `encdec evaluate` on DialogSum's test split, whose eval.json it reads from
RUN/eval/dialogsum/latest/), both paired by seed against the decoder-only run, the
table beside seeds 000 and 001, and the plot.

    cd docs/scripts      # beside paired.py, which it imports
    python adaptation_table.py score ../../runs/experiments/adapt_{cpu,scratch_cpu}/*/seed* \
        ../../runs/experiments/adapt_sources_cpu/*source/seed* --pairs ../../runs/experiments/adapt_eval/valid_pairs.jsonl
    python adaptation_table.py table --runs ../../runs/experiments --json ../results/adapt_cpu.json \
        --plot ../img/adaptation_cpu.png
    python adaptation_table.py cost --runs ../../runs/experiments --pairs ../../runs/experiments/adapt_eval/valid_pairs.jsonl

`score` writes RUN/eval/prefix_loss.json: the mean loss per target token of every pair of the pairs file
(docs/scripts/continuation_pairs.py) given its source, teacher-forced, from the run's latest checkpoint. The
targets are scored without the EOS encdec's target encoding closes them with: the pairs are cut mid-text, where a
decoder-only model never saw a document end but a UL2-trained encoder-decoder learned that its S-denoiser's targets
end there. A target starts with the space that separates it from its source, so that source and target tokens are
those of the running text.
"""

import argparse
import json
import statistics
from pathlib import Path

import torch
from paired import paired, spread

from encdec.cli.evaluate import text_encoding
from encdec.evaluation.likelihood import pair_examples, total_nll
from encdec.runs.open import open_model

RUNS = ("decoder_only", "ul2", "prefix_lm", "scratch", "unbalanced")
STAGES = {"source": "adapt_sources_cpu", "small_source": "adapt_sources_cpu", "scratch": "adapt_scratch_cpu"}
MAX_SOURCE_TOKENS = 384  # adapt_dialogsum_cpu.yaml's objective.max_source_len
LABELS = {
    "source": "(the source: decoder-only, 1,000 steps)",
    "small_source": "(the small source: 2 layers of width 32, 1,000 steps)",
    "decoder_only": "(a) decoder-only, continued",
    "ul2": "(b) adapted, UL2",
    "prefix_lm": "(c) adapted, PrefixLM",
    "scratch": "(d) encoder-decoder from scratch",
    "unbalanced": "(e) adapted, unbalanced (the small source's decoder)",
}
# seeds 000 and 001 (docs/experiments.md): the plain auto-regressive and parallel encoder-decoders against their
# decoder-only baseline, validation loss paired by seed (nats), from configs/experiments/seed000_cpu.yaml and
# seed001_cpu.yaml; their per-seed values are in docs/results/seed001_cpu.json and, for seed 000, in its table
SEEDS_000_001 = {
    "seed 000: auto-regressive encoder-decoder (no options) − decoder-only": (0.185, 0.043, "higher"),
    "seed 001: parallel encoder-decoder (no encoder loss) − decoder-only": (0.227, 0.025, "higher"),
}


def score(run: Path, pairs_file: Path) -> dict:
    opened = open_model(run, "latest")
    model, encoding = opened.model, text_encoding(opened)
    rows = [json.loads(line) for line in pairs_file.read_text(encoding="utf-8").splitlines()]
    pairs = [(row["source"], " " + row["target"]) for row in rows]
    examples, cut = pair_examples(model, encoding, pairs)
    eos = model.config.eos_id
    assert all(target[-1] == eos for _, target in examples)
    examples = [(source, target[:-1]) for source, target in examples]  # the closing EOS left out (see above)
    total, tokens = total_nll(model, examples, 32, torch.device("cpu"))
    result = {"prefix_loss": total / tokens, "tokens": tokens, "pairs": len(pairs), "cut": cut}
    result |= {"checkpoint": str(opened.run.checkpoint.path.name), "pairs_file": str(pairs_file)}
    out = run / "eval" / "prefix_loss.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def step_flops(root: Path) -> tuple[float, float]:
    """Forward and backward FLOPs of one step of 16 rows (torch's FlopCounterMode): the decoder-only model on
    128-token windows, and the adapted 4 + 4 encoder-decoder on PrefixLM rows of 64 tokens in and 64 out."""
    from torch.utils.flop_counter import FlopCounterMode

    def counted(model, *inputs, **named) -> float:
        model.train()
        with FlopCounterMode(display=False) as counter:
            model(*inputs, **named).loss.backward()
        return counter.get_total_flops()

    generator = torch.Generator().manual_seed(0)
    decoder_only = open_model(root / "adapt_cpu" / "decoder_only" / "seed1", "latest").model
    ids = torch.randint(5, 2000, (16, 128), generator=generator)
    adapted = open_model(root / "adapt_cpu" / "ul2" / "seed1", "latest").model
    src, tgt = (torch.randint(5, 2000, (16, 64), generator=generator) for _ in range(2))
    mask = torch.ones(16, 64, dtype=torch.bool)
    return counted(decoder_only, None, ids, labels=ids), counted(adapted, src, tgt, labels=tgt, src_mask=mask)


def untrained_adaptation(root: Path, pairs_file: Path, seed: int) -> float:
    """The prefix-conditional loss (as `score`) of seed `seed`'s source adapted into an encoder-decoder before any
    step: what the copied cross-attention costs the start."""
    import encdec
    from encdec.runs.model_section import build_model_config
    from encdec.training.adaptation import adapted_section, adapted_weights
    from encdec.training.init_from import load_pretrained

    source = load_pretrained(str(root / "adapt_sources_cpu" / "source" / f"seed{seed}"))
    trained = open_model(root / "adapt_cpu" / "ul2" / f"seed{seed}", "latest")  # its tokens and text encoding
    c = trained.model.config
    section = adapted_section(source.model_section)
    model = encdec.build_model(build_model_config(section, c.vocab_size, c.pad_id, c.eos_id, c.decoder_start_id))
    model.load_state_dict(adapted_weights(model.state_dict(), source.weights)[0])
    rows = [json.loads(line) for line in pairs_file.read_text(encoding="utf-8").splitlines()]
    examples, _ = pair_examples(model.eval(), text_encoding(trained), [(r["source"], " " + r["target"]) for r in rows])
    total, tokens = total_nll(model, [(source, target[:-1]) for source, target in examples], 32, torch.device("cpu"))
    return total / tokens


def seeds(folder: Path) -> list[Path]:
    return sorted((p for p in folder.glob("seed*") if p.name[4:].isdigit()), key=lambda p: int(p.name[4:]))


def collect(root: Path) -> dict:
    """Each run's per-seed figures: prefix-conditional loss, parameters, DialogSum ROUGE-L and test loss."""
    results = {}
    for name in ("source", "small_source", *RUNS):
        stage = root / STAGES.get(name, "adapt_cpu") / name
        row = {"prefix_loss": [], "parameters": None, "rougeL": [], "rouge_baseline": [], "dialogsum_loss": []}
        for run in seeds(stage):
            row["prefix_loss"].append(json.loads((run / "eval" / "prefix_loss.json").read_text())["prefix_loss"])
            row["parameters"] = json.loads((run / "summary.json").read_text())["parameters"]
        row["rougeL_whole_prompt"] = []
        for run in seeds(root / "adapt_dialogsum_cpu" / name):
            found = run / "eval" / "dialogsum" / "latest" / "eval.json"
            if found.is_file():
                evaluated = json.loads(found.read_text())
                row["rougeL"].append(evaluated["scores"]["rougeL"])
                row["rouge_baseline"].append(evaluated["baseline"]["rougeL"])
                row["dialogsum_loss"].append(evaluated["scores"]["test_loss"])
                row["rougeL_whole_prompt"].append(whole_prompt_rouge(run, found.parent / "predictions.jsonl"))
        results[name] = row
    return results


def whole_prompt_rouge(run: Path, predictions: Path) -> float:
    """ROUGE-L (as evaluate scores it) of the generated summaries whose templated dialogue fits the 384 source
    tokens the runs cut it to, so that "Summary:" ends the prompt: a decoder-only model reads no cue to summarise
    in a cut one."""
    from rouge_score import rouge_scorer

    tokenizer = open_model(run, "latest").run.tokenizer
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    rows = [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines()]
    fits = [r for r in rows if len(tokenizer.encode([r["source"] + "\nSummary:"])[0]) <= MAX_SOURCE_TOKENS]
    return 100 * statistics.fmean(scorer.score(r["reference"], r["prediction"])["rougeL"].fmeasure for r in fits)


def verdict_words(verdict: str, lower_is_better: bool) -> str:
    good, bad = ("better", "worse") if lower_is_better else ("worse", "better")
    return verdict.replace("lower", f"lower ({good})").replace("higher", f"higher ({bad})")


def against(values: list[float], reference: list[float], lower_is_better: bool, digits: int) -> tuple[str, str]:
    """The paired difference to the reference run ("mean ± sd") and its verdict in words."""
    mean, sd, verdict = paired(values, reference)
    return f"{mean:+.{digits}f} ± {sd:.{digits}f}", verdict_words(verdict, lower_is_better)


def table(results: dict) -> None:
    reference = results["decoder_only"]
    print("| run | parameters | prefix-conditional loss | − (a), paired by seed | verdict |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, row in results.items():
        cells = ("", "") if name == "decoder_only" else against(row["prefix_loss"], reference["prefix_loss"], True, 3)
        print(f"| {LABELS[name]} | {row['parameters']:,} | {spread(row['prefix_loss'])} | {' | '.join(cells)} |")
    print(
        "\n| fine-tuned from | DialogSum test loss | − (a), paired | verdict | ROUGE-L | − (a), paired | verdict "
        "| ROUGE-L, prompts that fit |"
    )
    print("| --- | ---: | ---: | --- | ---: | ---: | --- | ---: |")
    for name, row in results.items():
        if len(row["rougeL"]) < 2:
            continue
        rouge = f"{statistics.fmean(row['rougeL']):.2f} ± {statistics.stdev(row['rougeL']):.2f}"
        loss_cells, rouge_cells = ("", ""), ("", "")
        if name != "decoder_only":
            loss_cells = against(row["dialogsum_loss"], reference["dialogsum_loss"], True, 3)
            rouge_cells = against(row["rougeL"], reference["rougeL"], False, 2)
        fits = row["rougeL_whole_prompt"]
        print(
            f"| {LABELS[name]} | {spread(row['dialogsum_loss'])} | {' | '.join(loss_cells)} | {rouge} | "
            f"{' | '.join(rouge_cells)} | {statistics.fmean(fits):.2f} ± {statistics.stdev(fits):.2f} |"
        )
    baselines = [b for row in results.values() for b in row["rouge_baseline"]]
    if baselines:
        print(f"| trivial baseline (each dialogue's first sentence) | | | | {statistics.fmean(baselines):.2f} | | | |")
    print("\n| encoder-decoder − its decoder-only baseline (nats, paired by seed) | difference | verdict |")
    print("| --- | ---: | --- |")
    for label, (mean, sd, verdict) in SEEDS_000_001.items():
        print(f"| {label} | {mean:+.3f} ± {sd:.3f} | {verdict_words(verdict, True)} |")
    for name in ("scratch", "ul2", "prefix_lm", "unbalanced"):
        cells = against(results[name]["prefix_loss"], reference["prefix_loss"], True, 3)
        print(f"| issue 47: {LABELS[name]} − (a), prefix-conditional | {' | '.join(cells)} |")
    for name in ("scratch", "ul2", "prefix_lm", "unbalanced"):
        if len(results[name]["dialogsum_loss"]) == len(reference["dialogsum_loss"]) > 1:
            cells = against(results[name]["dialogsum_loss"], reference["dialogsum_loss"], True, 3)
            print(f"| issue 47: {LABELS[name]} − (a), DialogSum after fine-tuning | {' | '.join(cells)} |")


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in results if not n.endswith("source")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in (
        (axes[0], "prefix_loss", "prefix-conditional loss (nats/token, lower is better)"),
        (axes[1], "rougeL", "DialogSum ROUGE-L after fine-tuning (higher is better)"),
    ):
        for i, name in enumerate(names):
            values = results[name][key]
            if not values:
                continue
            ax.bar(i, statistics.fmean(values), color="#9ecae1" if name != "decoder_only" else "#fdae6b")
            ax.scatter([i] * len(values), values, color="black", s=12, zorder=3)
        ax.set_xticks(range(len(names)), [LABELS[n].split(" (")[0].split(") ")[-1] for n in names], rotation=20)
        ax.set_title(title, fontsize=9)
        baselines = [b for n in names for b in results[n]["rouge_baseline"]] if key == "rougeL" else []
        if baselines:
            ax.axhline(statistics.fmean(baselines), color="grey", linestyle="--", linewidth=1)
            ax.annotate("trivial baseline", (len(names) - 0.6, statistics.fmean(baselines) + 0.3), fontsize=8)
        values = [v for n in names for v in results[n][key]]
        if values:
            low, high = min(values), max(values)
            ax.set_ylim(low - 0.3 * (high - low + 1e-9), high + 0.3 * (high - low + 1e-9))
    fig.suptitle("Issue 47: a decoder-only model adapted into an encoder-decoder (3 seeds, dots; bars: means)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    scorer = commands.add_parser("score", help="write RUN/eval/prefix_loss.json for each run")
    scorer.add_argument("runs", type=Path, nargs="+")
    scorer.add_argument("--pairs", type=Path, required=True)
    costs = commands.add_parser("cost", help="a step's FLOPs of each family, and the adapted model's start")
    costs.add_argument("--runs", type=Path, default=Path("runs/experiments"))
    costs.add_argument("--pairs", type=Path, required=True)
    tabler = commands.add_parser("table", help="print the tables, write the JSON and the plot")
    tabler.add_argument("--runs", type=Path, default=Path("runs/experiments"))
    tabler.add_argument("--json", type=Path)
    tabler.add_argument("--plot", type=Path)
    args = parser.parse_args()
    if args.command == "score":
        for run in args.runs:
            result = score(run, args.pairs)
            print(f"{run}: {result['prefix_loss']:.4f} over {result['tokens']:,} tokens")
        return
    if args.command == "cost":
        decoder_only, adapted = step_flops(args.runs)
        print(
            f"a step's FLOPs: decoder-only {decoder_only:.3e}, encoder-decoder {adapted:.3e} ({adapted / decoder_only:.2f})"
        )
        for seed in (1, 2, 3):
            print(f"seed {seed}: adapted, before any step: {untrained_adaptation(args.runs, args.pairs, seed):.3f}")
        return
    results = collect(args.runs)
    table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
