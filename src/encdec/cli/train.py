"""`encdec train CONFIG.yaml --out RUN_DIR [--resume] [--set key.sub=value ...]`."""

from pathlib import Path

from encdec.training import load_config, train


def add_parser(subparsers):
    parser = subparsers.add_parser("train", help="train a model from a YAML run config")
    parser.add_argument("config", help="the run config (YAML)")
    parser.add_argument("--out", required=True, help="the run directory: checkpoints, metrics, plots")
    parser.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    parser.set_defaults(func=run)


def run(args) -> int:
    cfg = load_config(args.config, args.set)
    result = train(cfg, Path(args.out), resume=args.resume)
    if not result.is_main:  # another process under torchrun: rank 0 reports
        return 0
    print(f"{result.steps} steps in {result.wall_time:.1f}s ({result.tokens_per_s:,.0f} tokens/s); "
          f"{result.parameters:,} parameters")  # fmt: skip
    if result.val_loss is not None:
        print(f"train loss {result.train_loss:.4f}, validation loss {result.val_loss:.4f}")
    if result.interrupted:
        print(f"stopped by signal; resume with: encdec train {args.config} --out {args.out} --resume")
    return 0
