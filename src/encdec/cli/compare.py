"""`encdec compare`: train several configs on the same data, seed and budget, and tabulate them.

encdec compare a.yaml b.yaml --out runs/ab [--set training.steps=200]
encdec compare --experiment configs/experiments/rot5_ablation.yaml --out runs/ablation
"""

from pathlib import Path

from encdec.cli.output_paths import InputPath, add_out_directory
from encdec.errors import ConfigError
from encdec.training.experiments import RunSpec, read_experiment, run_experiment


def add_parser(subparsers):
    parser = subparsers.add_parser("compare", description=__doc__)
    parser.add_argument("configs", nargs="*", type=InputPath("the run config"), help="run configs (YAML), one run each")
    parser.add_argument("--experiment", type=InputPath("--experiment"), help="an experiment file listing the runs")
    add_out_directory(parser, "a directory for the experiment", "directory of the runs, the table and the plot")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override, for every run")
    parser.set_defaults(func=run)


def run(args) -> int:
    if bool(args.configs) == bool(args.experiment):
        raise ConfigError("give either run configs or --experiment, not both and not neither")
    if args.experiment:
        runs, seeds = read_experiment(Path(args.experiment), args.set)
    else:
        runs, seeds = [RunSpec(Path(c).stem, Path(c), list(args.set)) for c in args.configs], None
    if not args.out.strip():
        raise ConfigError("--out must name the experiment's directory, not an empty string")
    out = Path(args.out)
    run_experiment(runs, out, seeds)
    print((out / "results.md").read_text(), end="")
    print(f"curves: {out / 'curves.png'}")
    return 0
