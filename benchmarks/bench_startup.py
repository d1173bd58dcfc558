"""Start-up benchmark: how long encdec's commands take to begin, beside the interpreter and torch alone.

Run: python benchmarks/bench_startup.py [--repeats 7] [--run RUN_DIR]

Each command runs in a fresh process, its wall time measured until it exits (or, for `encdec generate`,
until its first line of output), interleaved with the others, the median of `--repeats` rounds shown:

    python -c pass                          the interpreter alone
    python -c "import torch"                torch's import alone
    encdec --help                           the command's help (target: within 0.5 s of `python -c pass`)
    encdec size --tokens 1e9                Chinchilla sizing (imports no torch)
    encdec size --preset t5-small           a preset's parameters, counted from its model built on the meta device
    encdec generate RUN -i input.txt        a run directory's first output line (target: within 1.5 s of
                                            `import torch`); a tiny run is trained first without --run

It also says, for `encdec --help` and the two `encdec size` commands, whether torch was imported
(`python -X importtime`).
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def first_line_seconds(command: list[str]) -> float:
    """Wall time from starting `command` to its first line on stdout (or its exit, if it writes none)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    process.stdout.readline()
    seconds = time.perf_counter() - started
    process.stdout.read()
    process.wait(timeout=600)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}")
    return seconds


def imports_torch(command: list[str]) -> bool:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *command[1:]], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    return any(line.rstrip().endswith("| torch") for line in done.stderr.splitlines())


def tiny_run(folder: Path) -> Path:
    """A run of the smallest config, trained for a few steps (the generate command's model)."""
    run = folder / "run"
    command = [sys.executable, "-m", "encdec", "train", str(ROOT / "configs/tiny.yaml"), "--out", str(run)]
    command += ["--set", "training.steps=4", "--set", "evaluation.interval=4", "--set", "output.save_interval=4"]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--run", type=Path, help="a run directory for the generate row (default: a tiny one)")
    args = parser.parse_args()
    encdec = [sys.executable, "-m", "encdec"]
    with tempfile.TemporaryDirectory() as folder:
        run = args.run or tiny_run(Path(folder))
        source = Path(folder) / "input.txt"
        source.write_text("Once upon a time there was a little girl.\n")
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            'python -c "import torch"': [sys.executable, "-c", "import torch"],
            "encdec --help": [*encdec, "--help"],
            "encdec size --tokens 1e9": [*encdec, "size", "--tokens", "1e9"],
            "encdec size --preset t5-small": [*encdec, "size", "--preset", "t5-small"],
            "encdec generate RUN (first line)": [*encdec, "generate", str(run), "-i", str(source)],
        }
        times = {name: [] for name in commands}
        for _ in range(args.repeats):
            for name, command in commands.items():
                times[name].append(first_line_seconds(command))
        medians = {name: statistics.median(values) for name, values in times.items()}
        print(f"medians of {args.repeats} runs, each a fresh process, interleaved")
        print(f"{'command':34} {'seconds':>8}  imports torch")
        for name, command in commands.items():
            torch_column = "yes" if name.startswith("encdec") and imports_torch(command) else ""
            if name == 'python -c "import torch"':
                torch_column = "yes"
            print(f"{name:34} {medians[name]:8.3f}  {torch_column}")
        help_gap = medians["encdec --help"] - medians["python -c pass"]
        generate_gap = medians["encdec generate RUN (first line)"] - medians['python -c "import torch"']
        print(f"encdec --help - python -c pass:              {help_gap:+.3f} s (target: within 0.5 s)")
        print(f"encdec generate - python -c 'import torch':  {generate_gap:+.3f} s (target: within 1.5 s)")


if __name__ == "__main__":
    main()
