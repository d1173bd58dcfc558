"""The server's joins: many sources encoded packed (`EncoderDecoder.encode_packed`: end to end, by first fit,
in rows as wide as the longest source) against a padded batch (`encode`: a row a source, as wide as the
longest); interleaved repeats, medians, one thread.

    python benchmarks/bench_packed_encode.py                       # t5-small, joins of 8, 16, 32 and 64 sources
    python benchmarks/bench_packed_encode.py --preset t5-tiny --sources 64 --repeats 3

Sources are 5 to 61 random tokens (a sentence's worth, or a few words), random weights; the table gives
milliseconds per call, the rows each way encodes and the largest difference between the two outputs.
"""

import argparse
import statistics
import time

import torch

from encdec.cli.options import whole_number
from encdec.errors import ConfigError
from encdec.models import build_model, preset, preset_names

MOST_SOURCES = 4096  # sources a join of the table may hold


def timed(fn) -> tuple[float, torch.Tensor]:
    """(seconds, hidden states) of one call of fn()."""
    with torch.no_grad():
        started = time.perf_counter()
        out = fn()
    return time.perf_counter() - started, out.hidden


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments, each number within its declared range; a bad one is argparse's one sentence, exit 2."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=preset_names(), default="t5-small")
    one = whole_number(1, MOST_SOURCES, "--sources")
    parser.add_argument(
        "--sources", type=lambda text: [one(n) for n in text.split(",")], default="8,16,32,64", help="join sizes"
    )
    parser.add_argument("--repeats", type=whole_number(1, 100, "--repeats"), default=5)
    try:
        return parser.parse_args(argv)
    except ConfigError as error:  # a number out of its declared range
        parser.error(str(error))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(preset(args.preset, vocab_size=32128)).eval()
    rows = []
    forward = model.encoder.forward
    model.encoder.forward = lambda ids, *a, **k: rows.append(ids.shape[0]) or forward(ids, *a, **k)
    print(f"{args.preset}, one thread, median of {args.repeats}")
    print(
        "| sources | tokens | padded rows | packed rows | padded (ms) | packed (ms) | padded / packed | max difference |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for count in args.sources:
        lengths = torch.randint(5, 62, (count,))
        ids = torch.randint(3, 32000, (count, 64))
        mask = torch.arange(64)[None, :] < lengths[:, None]
        ways = {"padded": lambda: model.encode(ids, mask), "packed": lambda: model.encode_packed(ids, mask)}
        times, outputs, shapes = {name: [] for name in ways}, {}, {}
        for _ in range(args.repeats):
            for name, fn in ways.items():
                rows.clear()
                seconds, outputs[name] = timed(fn)
                times[name].append(seconds)
                shapes[name] = rows[0]
        padded, packed = (statistics.median(times[name]) * 1e3 for name in ways)
        gap = (outputs["padded"] - outputs["packed"])[mask].abs().max().item()
        print(
            f"| {count} | {int(lengths.sum())} | {shapes['padded']} | {shapes['packed']} | {padded:.1f} | "
            f"{packed:.1f} | {padded / packed:.2f}x | {gap:.1e} |"
        )


if __name__ == "__main__":
    main()
