"""`encdec export MODEL --out DIR`: a trained run (or any model encdec opens) as a Hugging Face model directory.

MODEL is a run directory or one of its checkpoint directories (copied anywhere), or a Hugging Face
directory or Hub id (org/name[@revision]) written anew: e.g. a Hub checkpoint that has only a pickled pytorch_model.bin becomes safetensors.
Writes a run's best checkpoint (or --checkpoint) with its tokenizer and generation
defaults where transformers' AutoModelForSeq2SeqLM and AutoTokenizer load them: T5
(v1.0, v1.1), SwitchTransformers (T5 with experts), Marian (the canonical
Transformer), Pegasus (the pre-norm Transformer), BART, mBART, M2M100 / NLLB or T5Gemma, whichever computes
the same logits; a decoder-only model where AutoModelForCausalLM loads it, as Gemma 2, Gemma 3,
Llama, Qwen2 or Qwen3. A model none of them can express (ROT5's RoPE, the research families, the RNN) is
refused in one sentence.
A LoRA run exports with its adapters merged into the weights; with --adapter, its
adapters alone as a peft adapter directory (adapter_config.json, adapter_model.safetensors)
that peft's PeftModel.from_pretrained puts on the Hugging Face model the run adapted, for each family above.
"""

import argparse
from pathlib import Path

from encdec.cli.held import say_unless_refused
from encdec.cli.options import add_checkpoint_argument
from encdec.cli.output_paths import OutputPath, add_model_argument
from encdec.errors import ConfigError
from encdec.interop import export_hf
from encdec.interop.hub_ids import resolve_model
from encdec.runs.load import chosen_checkpoint
from encdec.runs.open import load_tokenizer, model_kind, open_model
from encdec.runs.run_export import export_adapter, export_run


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("export", description=__doc__)
    add_model_argument(
        parser, "a run directory of encdec train, a checkpoint directory, a Hugging Face directory or a Hub id"
    )
    parser.add_argument(
        "--out",
        "-o",
        type=OutputPath("--out", "a directory for the export", directory=True),
        required=True,
        help="the directory to write (new or empty)",
    )
    parser.add_argument("--force", action="store_true", help="write over an earlier export in --out")
    add_checkpoint_argument(parser)
    parser.add_argument("--adapter", action="store_true", help="a LoRA run's adapters alone, as a peft adapter")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.out.strip():
        raise ConfigError("--out must name the directory to write, not an empty string")
    source = resolve_model(args.model)
    if args.adapter:
        if model_kind(source) == "hf":
            raise ConfigError(f"--adapter exports a LoRA run's adapters, and {args.model} is not a run directory")
        base = export_adapter(source, Path(args.out), force=args.force, checkpoint=args.checkpoint)
        print(
            f"wrote {args.out}: a peft LoRA adapter; load it with peft's PeftModel.from_pretrained("
            f"AutoModelForSeq2SeqLM.from_pretrained(BASE), {args.out!r}), BASE being {base} as a Hugging Face "
            "directory (encdec export it first if it is a run)"
        )
        return 0
    if model_kind(source) in ("run", "checkpoint"):
        checkpoint, why = chosen_checkpoint(source, args.checkpoint)
        say_unless_refused(f"model: {source}, checkpoint {checkpoint.name} ({why})")
        name = export_run(source, Path(args.out), force=args.force, checkpoint=args.checkpoint)
    else:
        opened = open_model(source, args.checkpoint)  # a checkpoint named is refused: it has none
        name = export_hf(opened.model, load_tokenizer(source), Path(args.out), opened.generation, force=args.force)
    auto = "AutoModelForCausalLM" if name.endswith("ForCausalLM") else "AutoModelForSeq2SeqLM"
    print(
        f"wrote {args.out}: a {name} with its tokenizer; load it with transformers' "
        f"{auto}.from_pretrained and AutoTokenizer.from_pretrained"
    )
    return 0
