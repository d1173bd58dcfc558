"""Start-up benchmark: how long encdec's commands take to begin, beside the interpreter and torch alone.

Run: python benchmarks/bench_startup.py [--repeats 7] [--run RUN_DIR]

Each command runs in a fresh process, its wall time measured until it exits (or, for `encdec generate`,
until its first line of output), interleaved with the others, the median of `--repeats` rounds shown:

    python -c pass                          the interpreter alone
    python -c "import torch"                torch's import alone
    encdec --help                           the command's help (target: within 0.5 s of `python -c pass`)
    encdec size --tokens 1e9                Chinchilla sizing (imports no torch)
    encdec size --preset t5-small           a preset's parameters, counted from its model built on the meta device
    encdec size t5-11b/config.json          a Hugging Face config.json of T5-11B's shapes (target: under 3 s)
    encdec size switch-c/config.json        Switch-C's 2,048 experts in every layer, counted from smaller models
    encdec generate RUN -i input.txt        a run directory's first output line (target: within 1.5 s of
                                            `import torch`); a tiny run is trained first without --run

It also says, for `encdec --help` and the two `encdec size` commands, whether torch was imported
(`python -X importtime`).
"""

import argparse
import json
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
    return any(line.rpartition("|")[2].strip() == "torch" for line in done.stderr.splitlines())


T5_11B = dict(model_type="t5", vocab_size=32128, d_model=1024, d_kv=128, d_ff=65536, num_layers=24, num_heads=128)
SWITCH_C = dict(model_type="switch_transformers", vocab_size=32128, d_model=2080, d_kv=64, d_ff=6144, num_layers=15)
SWITCH_C |= dict(num_heads=32, num_experts=2048, encoder_sparse_step=1, decoder_sparse_step=1)
SWITCH_C |= dict(num_sparse_encoder_layers=15, num_sparse_decoder_layers=15)


def config_json(folder: Path, name: str, config: dict) -> str:
    """A Hugging Face config.json of `config`'s shapes alone (no weights), for `encdec size`."""
    (folder / name).mkdir()
    (folder / name / "config.json").write_text(json.dumps(config))
    return str(folder / name / "config.json")


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
            "encdec size t5-11b/config.json": [*encdec, "size", config_json(Path(folder), "t5-11b", T5_11B)],
            "encdec size switch-c/config.json": [*encdec, "size", config_json(Path(folder), "switch-c", SWITCH_C)],
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
        slowest = max(medians[name] for name in medians if name.startswith("encdec size"))
        print(f"slowest encdec size:                         {slowest:.3f} s (target: under 3 s)")


if __name__ == "__main__":
    main()
