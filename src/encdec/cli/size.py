"""`encdec size CONFIG`: parameter counts of a run config's model, and Chinchilla sizing.

The model is counted as its family builds it, on torch's meta device (models/parameter_count.py): no memory
for any size, thousands of experts or layers counted from smaller models of the same config. Chinchilla
sizing alone (--tokens, --flops, --params) imports no torch.

encdec size configs/tiny.yaml          parameters, total and without position tables (a run that fine-tunes or
                                       adapts a local run or Hugging Face directory: that model, as training
                                       builds it; a Hub id is not fetched)
encdec size nllb-200/config.json       the same for a Hugging Face checkpoint's config.json (or its directory)
encdec size --preset rot5-mini         the same for a preset
encdec size --tokens 1.37e9            compute-optimal FLOPs and parameters for a token budget
encdec size --flops 3.65e17 / --params 48e6
"""

from pathlib import Path
from typing import Annotated

from encdec.cli.output_paths import InputPath
from encdec.errors import ConfigError
from encdec.schema import Range, argument_type
from encdec.sizing import MAX_FLOPS, MAX_PARAMS, MAX_TOKENS, MIN_FLOPS, MIN_PARAMS, MIN_TOKENS, chinchilla


def add_parser(subparsers):
    parser = subparsers.add_parser("size", description=__doc__)
    parser.add_argument(
        "config",
        nargs="?",
        type=InputPath("the config"),
        help="a run config (YAML), or a Hugging Face config.json or directory",
    )
    parser.add_argument("--preset", help="a model preset instead of a config")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config value")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--flops", type=budget_type("--flops", MIN_FLOPS, MAX_FLOPS), help="training compute C")
    budget.add_argument("--tokens", type=budget_type("--tokens", MIN_TOKENS, MAX_TOKENS), help="training tokens D")
    budget.add_argument("--params", type=budget_type("--params", MIN_PARAMS, MAX_PARAMS), help="parameters N")
    parser.set_defaults(func=run)


def budget_type(flag: str, lo: float, hi: float):
    """An argparse type: a number within what the Chinchilla fits size (encdec.sizing), so no result is inf."""
    return argument_type(Annotated[float, Range(lo, hi, says=f"from {lo:.3g} to {hi:.3g} (what the fits size)")], flag)


def model_config(args):
    if args.preset:
        from encdec.models.presets import preset

        return preset(args.preset)
    path = Path(args.config)
    if path.suffix == ".json" or path.is_dir():  # a Hugging Face checkpoint's, read as load_hf reads it
        from encdec.interop.from_hf import hf_model_config

        if args.set:
            raise ConfigError("--set overrides a run config's values, not a Hugging Face config.json's")
        return hf_model_config(path)
    from encdec.training.run_config import load_config  # the whole run config, checked as train checks it

    cfg = load_config(args.config, args.set)
    started = started_from(cfg)
    if started is not None:  # fine-tuning or adapting a local run or Hugging Face directory: its model under ours
        section, vocab = started
        return cfg.model.over(section).build(vocab, 0, 1, 0)
    if cfg.training.init_from:
        print(
            f"training.init_from {cfg.training.init_from} is not a local directory (a size fetches nothing): "
            "counted from this config's own model section"
        )
    vocab = cfg.model.get("vocab_size") or tokenizer_vocab_size(cfg)
    own = cfg.model.over({}) if cfg.training.init_from else cfg.model  # a fine-tuning run's keys, built alone
    return own.build(vocab, 0, 1, 0)


def started_from(cfg) -> tuple[dict, int] | None:
    """The model section and vocabulary training.init_from's model gives the run (adapted where the run adapts a
    decoder-only model, training/adaptation.py), read from a local run or Hugging Face directory without its
    weights; None without init_from, or for a Hub id, which a size does not fetch: the run's own section is
    counted then."""
    from encdec.training.adaptation import adapted_section, wants_adaptation

    source = section_of(cfg.training.init_from)
    if source is None:
        return None
    section, vocab = source
    if wants_adaptation(section, cfg.model):
        decoder = section_of(cfg.training.init_decoder_from) if cfg.training.init_decoder_from else None
        section = adapted_section(section, decoder[0] if decoder else None)
    return section, vocab


def section_of(name: str | None) -> tuple[dict, int] | None:
    """(model section, vocabulary) of a local run or Hugging Face directory, read without weights; None else."""
    if not name or not Path(name).is_dir():
        return None
    from encdec.runs.open import model_kind
    from encdec.runs.run_dir import RunDir
    from encdec.tokenizers import load_tokenizer
    from encdec.training.init_from import model_section
    from encdec.training.run_config import saved_config

    path = Path(name)
    if model_kind(path, "training.init_from ") == "hf":
        from encdec.interop.from_hf import hf_model_config

        cfg = hf_model_config(path)
        return model_section(cfg), cfg.vocab_size
    checkpoint = RunDir(path).checkpoint("best")
    return saved_config(checkpoint).model, load_tokenizer(checkpoint.tokenizer).vocab_size


def tokenizer_vocab_size(cfg) -> int:
    """The vocabulary the run's tokenizer will have, without training one."""
    t = cfg.tokenizer
    if t.kind in ("bpe", "unigram"):
        return t.vocab_size
    from encdec.tokenizers import build_tokenizer

    return build_tokenizer(
        t.kind, t.path, num_sentinels=t.num_sentinels, extra_specials=tuple(t.extra_specials)
    ).vocab_size


def run(args) -> int:
    if not (args.config or args.preset or args.flops or args.tokens or args.params):
        raise ConfigError("give a run config, --preset, or one of --flops, --tokens, --params")
    if args.config or args.preset:
        from encdec.models.parameter_count import count_parameters_of

        cfg = model_config(args)
        count = count_parameters_of(cfg)  # the model's, built on the meta device (a refusal: what building says)
        total, without = count.total, count.without_positions
        print(f"family {cfg.family}, vocabulary {cfg.vocab_size:,}")
        print(f"parameters:                    {total:,}")
        print(f"without position embeddings:   {without:,}")
        if not (args.flops or args.tokens or args.params):
            args.params = total
    if args.flops or args.tokens or args.params:
        point = chinchilla(args.flops, args.tokens, args.params)
        print("Chinchilla (N_opt = 0.6 C^0.45, D_opt = 0.3 C^0.55):")
        print(f"  compute C      {point.flops:.3e} FLOPs")
        print(f"  parameters N   {point.params:,.0f}")
        print(f"  tokens D       {point.tokens:,.0f}")
        print(f"  6 * N * D      {point.flops_6nd:.3e} FLOPs (the dense-transformer approximation)")
    return 0
