"""`encdec generate MODEL_DIR`: translate, summarise or continue text with a trained or downloaded model.

Reads one input per line from --input (or stdin), writes one output per input as
text lines or JSONL records, and streams the tokens of a single greedy or sampled
input to the terminal as they are decoded. MODEL_DIR is a run directory of
`encdec train` (its best checkpoint, with its own tokenizer; a seq2seq run's
source template is applied to each input) or a local Hugging Face directory (T5,
Marian, BART) with its tokenizer, read with transformers' AutoTokenizer (the
optional `hf` extra). --device picks where the model runs (default: a GPU when
torch sees one, else the CPU).
"""

import argparse
import json
import sys
from pathlib import Path

import torch

from encdec.errors import CheckpointError, ConfigError, DataError
from encdec.generation import generate
from encdec.interop import load_hf

OPTIONS = {  # flag -> (type, help); each becomes the generation option of the same name
    "max_new_tokens": (int, "most tokens to generate per input"),
    "min_new_tokens": (int, "fewest tokens before EOS is allowed"),
    "num_beams": (int, "beam width (1: greedy or sampling)"),
    "length_penalty": (float, "beam score = log-prob sum / length ** this"),
    "no_repeat_ngram_size": (int, "never repeat an n-gram of this size"),
    "num_return_sequences": (int, "outputs per input (beams or samples)"),
    "repetition_penalty": (float, "penalise tokens already generated (> 1)"),
    "temperature": (float, "sampling temperature"),
    "top_k": (int, "sample among the k most likely tokens (0: all)"),
    "top_p": (float, "sample within this probability mass"),
    "seed": (int, "seed for reproducible sampling"),
}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("generate", help="generate text from a model directory", description=__doc__)
    parser.add_argument("model_dir", type=Path, help="a run directory of encdec train, or a Hugging Face model directory (T5, Marian, BART)")
    parser.add_argument("--input", "-i", default="-", help="a file with one input per line (default: stdin)")
    parser.add_argument("--output", "-o", default="-", help="where to write outputs (default: stdout)")
    parser.add_argument("--format", choices=("text", "jsonl"), default="text", help="one line or one record per input")
    parser.add_argument("--prefix", default="", help='text put before every input, e.g. "summarize: " for T5')
    parser.add_argument("--batch-size", type=int, default=8, help="inputs decoded together")
    parser.add_argument("--do-sample", action="store_true", help="sample instead of taking the most likely token")
    parser.add_argument("--no-stream", action="store_true", help="do not stream the tokens of a single input")
    add_device_argument(parser)
    for name, (kind, text) in OPTIONS.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=None, help=text)
    parser.set_defaults(func=run)


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto",
                        help="cpu, cuda, cuda:N, or auto (default): cuda when torch sees a GPU, else cpu")  # fmt: skip


def resolve_device(name: str) -> torch.device:
    """The torch.device --device names; asking for a GPU torch cannot see is one sentence (ConfigError)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device must be cpu, cuda, cuda:N or auto, got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name} asks for a GPU but torch sees none; use --device cpu or auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ConfigError(f"--device {name} asks for GPU {device.index} but torch sees only {count} GPU(s)")
    return device


class RunTokenizer:
    """An encdec tokenizer behind the small part of Hugging Face's tokenizer interface used here."""

    def __init__(self, tokenizer, source_template: str = "{source}"):
        self.tokenizer = tokenizer
        self.source_template = source_template

    def __call__(self, texts: list[str], return_tensors: str = "pt", padding: bool = True) -> dict:
        rows = self.tokenizer.encode([self.source_template.format(source=t) for t in texts])
        if any(not row for row in rows):
            raise DataError("an input is empty after tokenization; give each input some text")
        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = True
        return {"input_ids": ids, "attention_mask": mask}

    def batch_decode(self, ids: torch.Tensor, skip_special_tokens: bool = True) -> list[str]:
        return self.tokenizer.decode(ids.tolist(), skip_special=skip_special_tokens)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.tokenizer.decode([ids], skip_special=skip_special_tokens)[0]


def load_model_and_tokenizer(path: Path):
    """The model and tokenizer of MODEL_DIR: a run directory of `encdec train` or a Hugging Face directory."""
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory")
    from encdec.training.run import is_run_dir, load_run

    if is_run_dir(path):
        run = load_run(path, "best")
        objective = run.config.objective
        template = objective.source_template if objective.kind == "seq2seq" else "{source}"
        return run.model, RunTokenizer(run.tokenizer, template)
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path} has no config.json: `encdec generate` reads Hugging Face model directories")
    model = load_hf(path)
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError("reading a Hugging Face tokenizer needs transformers: pip install 'encdec[hf]'") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} has no tokenizer transformers can read ({error})") from None
    return model, tokenizer


def read_inputs(source: str, prefix: str) -> list[str]:
    text = sys.stdin.read() if source == "-" else _read_file(Path(source))
    lines = text.splitlines()
    if not lines:
        raise DataError("there is no input: give --input FILE or write lines to stdin")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise DataError(f"input line {number} is empty")
    return [prefix + line for line in lines]


def _read_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise DataError(f"cannot read {path}: {error.strerror}") from None


def stream_printer(tokenizer, stream):
    """A streamer that prints each new piece of the decoded text as soon as its token arrives."""
    tokens, shown = [], ""

    def on_tokens(step_tokens: torch.Tensor) -> None:
        nonlocal shown
        tokens.append(int(step_tokens[0]))
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        stream.write(text[len(shown) :])
        stream.flush()
        shown = text

    return on_tokens


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    model, tokenizer = load_model_and_tokenizer(args.model_dir)
    model.to(device)
    inputs = read_inputs(args.input, args.prefix)
    options = {name: getattr(args, name) for name in OPTIONS if getattr(args, name) is not None}
    if args.do_sample:
        options["do_sample"] = True
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")  # noqa: SIM115
    effective = {**getattr(model, "generation_defaults", {}), **options}  # the checkpoint may default to beams
    streaming = (len(inputs) == 1 and args.format == "text" and out.isatty() and not args.no_stream
                 and effective.get("num_beams", 1) == 1 and effective.get("num_return_sequences", 1) == 1)  # fmt: skip
    try:
        for start in range(0, len(inputs), args.batch_size):
            batch = inputs[start : start + args.batch_size]
            encoded = tokenizer(batch, return_tensors="pt", padding=True)
            streamer = {"streamer": stream_printer(tokenizer, out)} if streaming else {}
            ids = generate(model, encoded["input_ids"], encoded["attention_mask"], **options, **streamer).cpu()
            texts = tokenizer.batch_decode(ids[:, 1:], skip_special_tokens=True)
            write_outputs(out, batch, texts, args.format, streamed=streaming)
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def write_outputs(out, inputs: list[str], texts: list[str], fmt: str, streamed: bool = False) -> None:
    """Write the outputs of `inputs` (several per input when num_return_sequences > 1)."""
    per_input = len(texts) // len(inputs)
    for i, source in enumerate(inputs):
        outputs = [text.strip() for text in texts[i * per_input : (i + 1) * per_input]]
        if fmt == "jsonl":
            record = {"input": source, "output": outputs[0] if per_input == 1 else outputs}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        elif streamed:
            out.write("\n")
        else:
            out.write("\n".join(outputs) + "\n")
