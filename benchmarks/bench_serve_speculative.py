"""Speculative decoding in the server against plain continuous batching, at 1, 8 and 32 concurrent clients: tokens/s
and the draft's acceptance side by side.

Run: python benchmarks/bench_serve_speculative.py TARGET DRAFT [--shares-encoder] [--num-assistant-tokens 3]
         [--draft-quantize int8] [--clients 1,8,32] [--inputs FILE] [--sentences 64] [--max-new-tokens 64]
         [--repeats 2] [--threads N]

TARGET and DRAFT are run or Hugging Face directories of one tokenizer (runs/m30k_t5small and runs/m30k_draft: a
t5-small-shaped target and a one-layer draft distilled against its frozen encoder, --shares-encoder). The requests
are the first --sentences lines of --inputs (default: Multi30k's 2016 Flickr test sources), greedy up to
--max-new-tokens, each ending at its EOS. For each client count, `clients` threads send them back to back through
the server's scheduler (serving.scheduler, in-process: the HTTP layer is the same for both), each taking the next
sentence once its last is answered; the systems alternate round by round (the order rotated each repeat), each
round on a scheduler of its own:

    plain         continuous batching (`encdec serve MODEL`)
    speculative   the same with the draft (`encdec serve MODEL --draft DRAFT ...`): each round the draft proposes k
                  tokens for every speculating row and the model checks each row's k + 1 positions in one step,
                  each row keeping its own accepted count (serving.speculative_rows)

The table: per client count, each system's median tokens/s (new tokens, EOS included, over the round's wall time),
the speculative one's ratio to plain, its tokens per round (a row's gain per target step) and share of drafts
accepted, and the share of outputs equal to plain's (1.00: speculative greedy is plain greedy, token for token).
A second table says why, per row count (the client counts): the model's step at 1 and at k + 1 positions a row and
the draft's at 1, and a round's cost (k draft steps and one model step of k + 1) in plain steps: speculation pays
where the tokens a round gains exceed that ratio.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from encdec.cli.options import whole_number
from encdec.generation.config import AssistantTokens
from encdec.generation.speculative import SpeculativeStats
from encdec.schema import argument_type
from encdec.serving.scheduler import Scheduler
from encdec.serving.speculative_rows import ServedDraft

sys.path.insert(0, str(Path(__file__).parent))
from bench_serve import drive  # noqa: E402
from bench_speculative import add_pair_arguments, comma_counts, open_pair, parsed  # noqa: E402

SYSTEMS = ("plain", "speculative")
STEP_REPEATS = 10  # timings of each step a row count


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_arguments(parser, sentences=64, repeats=2)
    parser.add_argument(
        "--num-assistant-tokens",
        type=argument_type(AssistantTokens, "--num-assistant-tokens"),
        default=3,
        help="draft tokens a round (default 3)",
    )
    parser.add_argument(
        "--clients", type=comma_counts(whole_number(1, 1024, "--clients")), default=[1, 8, 32], help="default 1,8,32"
    )
    return parsed(parser, argv)


def serve_round(scheduler: Scheduler, encoded: list[dict], clients: int, max_new_tokens: int):
    """(wall seconds, new tokens, outputs in request order) of `clients` threads sending `encoded` back to back."""
    outputs: list[torch.Tensor | None] = [None] * len(encoded)

    def submit(index: int) -> None:
        inputs, options = encoded[index], {"max_new_tokens": max_new_tokens}
        outputs[index] = scheduler.run(inputs["input_ids"], inputs["attention_mask"], options).cpu()

    seconds, _ = drive(submit, [(index,) for index in range(len(encoded))], clients)
    return seconds, sum(out.shape[1] - 1 for out in outputs), outputs


def compare(
    target,
    draft,
    shares_encoder: bool,
    k: int,
    encoded: list[dict],
    clients: list[int],
    repeats: int,
    max_new_tokens: int,
) -> list[dict]:
    """Per client count: each system's median tokens/s, the speculative one's acceptance (SpeculativeStats of its
    last round) and the share of its outputs equal to plain's. Rounds interleaved, a scheduler each."""
    results = []
    for count in clients:
        rates: dict[str, list[float]] = {name: [] for name in SYSTEMS}
        outputs, stats = {}, SpeculativeStats()
        for repeat in range(repeats + 1):  # the first: a warm-up, not counted
            for name in SYSTEMS[repeat % 2 :] + SYSTEMS[: repeat % 2]:
                served = ServedDraft(draft, shares_encoder, k) if name == "speculative" else None
                scheduler = Scheduler(target, max_rows=max(64, count), draft=served)
                try:
                    seconds, tokens, outputs[name] = serve_round(scheduler, encoded, count, max_new_tokens)
                finally:
                    scheduler.stop()
                if repeat:
                    rates[name].append(tokens / seconds)
                if served is not None:
                    stats = scheduler.spec.stats
        same = sum(torch.equal(a, b) for a, b in zip(outputs["plain"], outputs["speculative"])) / len(encoded)
        medians = {name: statistics.median(rates[name]) for name in SYSTEMS}
        results.append({"clients": count, **medians, "stats": stats, "same": same})
    return results


def step_costs(target, draft, k: int, source: dict, rows: list[int], repeats: int = STEP_REPEATS) -> list[dict]:
    """Per row count R: the median ms of the model's step over R rows at 1 and at k + 1 positions and of the draft's
    step at 1 (each after 8 tokens written, cut back after each timing): what a round costs against a plain step."""
    costs = []
    with torch.inference_mode():
        for count in rows:
            ids, mask = source["input_ids"].repeat(count, 1), source["attention_mask"].repeat(count, 1)
            timings = {}
            for name, model, width in (
                ("target 1", target, 1),
                (f"target {k + 1}", target, k + 1),
                ("draft 1", draft, 1),
            ):
                state = model.start(ids, mask, 8 + k + 1)
                model.step(torch.zeros(count, 8, dtype=torch.long, device=ids.device), state)
                tokens = torch.zeros(count, width, dtype=torch.long, device=ids.device)
                times = []
                for _ in range(repeats):
                    started = time.perf_counter()
                    model.step(tokens, state)
                    times.append(1000 * (time.perf_counter() - started))
                    state.truncate(8)
                timings[name] = statistics.median(times)
            costs.append({"rows": count, **timings})
    return costs


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    target, draft_model, encoded = open_pair(args)
    results = compare(
        target.model,
        draft_model,
        args.shares_encoder,
        args.num_assistant_tokens,
        encoded,
        args.clients,
        args.repeats,
        args.max_new_tokens,
    )
    quantized = f", draft {args.draft_quantize}" if args.draft_quantize else ""
    print(
        f"{len(encoded)} requests of {args.inputs.name} a round, greedy, k = {args.num_assistant_tokens}{quantized}, "
        f"{torch.get_num_threads()} threads, median of {args.repeats} interleaved rounds"
    )
    print("| clients | plain tokens/s | speculative tokens/s | vs plain | tokens per round | accepted | same |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in results:
        s = row["stats"]
        print(
            f"| {row['clients']} | {row['plain']:,.0f} | {row['speculative']:,.0f} | "
            f"{row['speculative'] / row['plain']:.2f}x | {s.tokens_per_step:.2f} | {s.acceptance_rate:.2f} | "
            f"{row['same']:.2f} |"
        )
    k = args.num_assistant_tokens
    costs = step_costs(target.model, draft_model, k, encoded[0], args.clients)
    print(f"\nstep costs (ms, median of {STEP_REPEATS}): a round is k = {k} draft steps and one model step of {k + 1}")
    print(f"| rows | model, 1 position | model, {k + 1} positions | draft, 1 position | a round / a plain step |")
    print("| --- | --- | --- | --- | --- |")
    for row in costs:
        one, many, drafted = row["target 1"], row[f"target {k + 1}"], row["draft 1"]
        print(f"| {row['rows']} | {one:.1f} | {many:.1f} | {drafted:.1f} | {(many + k * drafted) / one:.2f} |")


if __name__ == "__main__":
    main()
