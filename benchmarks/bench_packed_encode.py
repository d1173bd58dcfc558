"""The server's joins: many sources encoded end to end in one packed row (`EncoderDecoder.encode_packed`), the
encoder attending by chunks of the longest source (a token sees none farther) against the whole row's square
of scores, which it took before; interleaved repeats, medians, one thread.

    python benchmarks/bench_packed_encode.py                       # t5-small, joins of 8, 16, 32 and 64 sources
    python benchmarks/bench_packed_encode.py --preset t5-tiny --sources 64 --repeats 3

Sources are 25 to 61 random tokens (a sentence's worth), random weights; the table gives milliseconds per
encode_packed call and the largest difference between the two paths' outputs.
"""

import argparse
import statistics
import time

import torch

from encdec.models import build_model, encoder, preset


def whole_row(self, layer: int) -> int | None:
    """SelfMasks.band without the packed batch's band: the path encode_packed took before."""
    return self.encoder.band(layer)


def encode(model, ids, mask, band) -> tuple[float, torch.Tensor]:
    encoder.SelfMasks.band = band
    with torch.no_grad():
        started = time.perf_counter()
        hidden = model.encode_packed(ids, mask).hidden
    return time.perf_counter() - started, hidden


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="t5-small")
    parser.add_argument("--sources", default="8,16,32,64", help="comma-separated join sizes")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model(preset(args.preset, vocab_size=32128)).eval()
    banded = encoder.SelfMasks.band
    print(f"{args.preset}, one thread, median of {args.repeats}")
    print("| sources | tokens | whole row (ms) | by chunks of the longest (ms) | ratio | max difference |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    try:
        for count in map(int, args.sources.split(",")):
            lengths = torch.randint(25, 62, (count,))
            ids = torch.randint(3, 32000, (count, 61))
            mask = torch.arange(61)[None, :] < lengths[:, None]
            times = {"whole": [], "banded": []}
            outputs = {}
            for _ in range(args.repeats):
                for name, band in (("whole", whole_row), ("banded", banded)):
                    seconds, outputs[name] = encode(model, ids, mask, band)
                    times[name].append(seconds)
            whole, chunks = (statistics.median(times[name]) * 1e3 for name in ("whole", "banded"))
            gap = (outputs["whole"] - outputs["banded"]).abs().max().item()
            print(
                f"| {count} | {int(lengths.sum())} | {whole:.0f} | {chunks:.0f} | {whole / chunks:.2f}x | {gap:.1e} |"
            )
    finally:
        encoder.SelfMasks.band = banded


if __name__ == "__main__":
    main()
