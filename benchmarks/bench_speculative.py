"""Speculative decoding against plain greedy: tokens/s on a translation test set, the acceptance beside.

Run: python benchmarks/bench_speculative.py TARGET DRAFT [--shares-encoder] [--num-assistant-tokens 3,5]
         [--draft-quantize int8] [--inputs FILE] [--sentences 100] [--batch-size 1] [--max-new-tokens 64]
         [--repeats 3] [--threads N]

TARGET and DRAFT are run or Hugging Face directories of one tokenizer (configs/recipes/multi30k_draft.yaml makes
such a draft, its encoder the target's: --shares-encoder). The inputs are the first --sentences lines of --inputs
(default: Multi30k's 2016 Flickr test sources, plain or gzipped), generated --batch-size at a time (default 1: each
alone), greedy, up to --max-new-tokens. Every repeat runs the systems in turn (plain greedy, then speculative with each k of
--num-assistant-tokens, the order rotated each repeat) over all the sentences; the table shows each system's median
tokens/s (new tokens, EOS included, over the wall time of the generate calls, encoder included), its ratio to plain
greedy's, the tokens each row gained a target step and the share of draft tokens accepted, and the share of
batches whose output equals plain greedy's (1.00: speculative greedy is plain greedy, token for token).

On a CPU at batch 1 a step reads every weight once, so its cost follows the bytes read: for t5-small's shape
(one thread, November 2026) the target's step took ~15 ms whether it read 1 or 6 positions, a one-layer draft's
~7.7 ms (its 32,128 x 512 vocabulary product is most of it) and the same draft in int8 ~2.2 ms. With the fp32
draft, k = 4 drafts cost two target steps; --draft-quantize int8 makes them a little over half of one.
"""

import argparse
import gzip
import statistics
import time
from pathlib import Path

import torch

from encdec.cli.options import whole_number
from encdec.errors import ConfigError
from encdec.generation.config import AssistantTokens
from encdec.generation.generate import generate
from encdec.generation.speculative import SpeculativeStats
from encdec.generation.text_generator import TextGenerator
from encdec.quantization import SCHEMES, quantize
from encdec.runs.open import open_model
from encdec.schema import argument_type

MULTI30K_TEST = Path(__file__).resolve().parents[2] / "shared/data/translation/multi30k/test_2016_flickr.en.gz"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_arguments(parser, sentences=100, repeats=3)
    parser.add_argument(
        "--num-assistant-tokens",
        type=comma_counts(argument_type(AssistantTokens, "--num-assistant-tokens")),
        default=[3, 5],
        help="draft tokens per target step, one speculative system each (default 3,5)",
    )
    parser.add_argument(
        "--batch-size",
        type=whole_number(1, 4096, "--batch-size"),
        default=1,
        help="sentences a generate call (default 1)",
    )
    return parsed(parser, argv)


def add_pair_arguments(parser: argparse.ArgumentParser, sentences: int, repeats: int) -> None:
    """The arguments of a benchmark of a target and its draft (this one's and bench_serve_speculative's): the two
    models, how the draft reads, the inputs, and the run's numbers, each declared with its range."""
    parser.add_argument("target", type=Path, help="the model: a run or Hugging Face directory")
    parser.add_argument("draft", type=Path, help="its draft, of the same tokenizer")
    parser.add_argument("--shares-encoder", action="store_true", help="the draft reads the target's encoder output")
    parser.add_argument("--draft-quantize", choices=SCHEMES, help="the draft's linear layers in int8 (its proposals)")
    parser.add_argument("--inputs", type=Path, default=MULTI30K_TEST, help="source sentences, one a line (.gz too)")
    parser.add_argument(
        "--sentences",
        type=whole_number(1, 100_000, "--sentences"),
        default=sentences,
        help=f"how many of them (default {sentences})",
    )
    parser.add_argument("--max-new-tokens", type=whole_number(1, 4096, "--max-new-tokens"), default=64)
    parser.add_argument("--repeats", type=whole_number(1, 100, "--repeats"), default=repeats)
    parser.add_argument(
        "--threads",
        type=whole_number(1, 1024, "--threads"),
        default=None,
        help="torch's threads (default: torch's choice)",
    )


def comma_counts(one):
    """An argparse type: comma-separated counts, each taken by the type `one` (its range, its sentence)."""
    return lambda text: [one(part) for part in text.split(",")]


def parsed(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """parser's arguments; a number out of its declared range is one sentence, argparse's exit 2."""
    try:
        return parser.parse_args(argv)
    except ConfigError as error:
        parser.error(str(error))


def read_sentences(path: Path, count: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as stream:
        lines = [line.strip() for line in stream if line.strip()]
    return lines[:count]


def run_system(target, encoded: list[dict], options: dict) -> tuple[float, int, list[torch.Tensor], SpeculativeStats]:
    """(seconds, new tokens, outputs, acceptance) of greedy decoding every input (a batch) under `options`."""
    stats, outputs, tokens, seconds = SpeculativeStats(), [], 0, 0.0
    for inputs in encoded:
        start = time.perf_counter()
        out = generate(target, inputs["input_ids"], inputs["attention_mask"], return_dict_in_generate=True, **options)
        seconds += time.perf_counter() - start
        outputs.append(out.sequences)
        tokens += new_tokens(out.sequences, target.config.pad_id)
        if out.speculative is not None:
            stats.add(out.speculative)
    return seconds, tokens, outputs, stats


def new_tokens(sequences: torch.Tensor, pad_id: int) -> int:
    """The tokens generated in sequences (B, L), EOS included: every column after the start but the padding that
    follows a row's EOS (a row of batch 1 ends at its EOS)."""
    return int((sequences[:, 1:] != pad_id).sum())


def open_pair(args: argparse.Namespace, batch_size: int = 1):
    """(the opened target, the draft's model quantized as --draft-quantize asks, the input sentences encoded
    `batch_size` at a time), with torch's threads set: what this benchmark and bench_serve_speculative.py (batch
    1) start from."""
    if args.threads:
        torch.set_num_threads(args.threads)
    target, draft = open_model(args.target), open_model(args.draft)
    draft_model = quantize(draft.model, args.draft_quantize) if args.draft_quantize else draft.model
    text = TextGenerator(target.text, target.generation)
    sentences = read_sentences(args.inputs, args.sentences)
    batches = [sentences[i : i + batch_size] for i in range(0, len(sentences), batch_size)]
    return target, draft_model, [text.encode(batch) for batch in batches]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    target, draft_model, encoded = open_pair(args, args.batch_size)
    base = dict(max_new_tokens=args.max_new_tokens)
    systems = {"plain greedy": base}
    for k in args.num_assistant_tokens:
        systems[f"speculative k={k}"] = dict(
            base, assistant_model=draft_model, assistant_shares_encoder=args.shares_encoder, num_assistant_tokens=k
        )
    for options in systems.values():  # warm-up
        run_system(target.model, encoded[:2], options)
    rates = {name: [] for name in systems}
    outputs, stats = {}, {}
    names = list(systems)
    for repeat in range(args.repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:  # interleaved, the order rotated
            seconds, tokens, outputs[name], stats[name] = run_system(target.model, encoded, systems[name])
            rates[name].append(tokens / seconds)
    plain = statistics.median(rates["plain greedy"])
    sentences = sum(len(inputs["input_ids"]) for inputs in encoded)
    print(
        f"{sentences} sentences of {args.inputs.name}, batch {args.batch_size}, greedy, {torch.get_num_threads()} threads"
    )
    print("| system | tokens/s | vs plain | tokens a row per target step | draft tokens accepted | same as plain |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in systems:
        rate = statistics.median(rates[name])
        same = sum(torch.equal(a, b) for a, b in zip(outputs[name], outputs["plain greedy"])) / len(encoded)
        s = stats[name]
        steps = f"{s.tokens_per_step:.2f}" if s.target_steps else "1.00"
        accepted = f"{s.acceptance_rate:.2f}" if s.target_steps else "-"
        print(f"| {name} | {rate:,.0f} | {rate / plain:.2f}x | {steps} | {accepted} | {same:.2f} |")


if __name__ == "__main__":
    main()
