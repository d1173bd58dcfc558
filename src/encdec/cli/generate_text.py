"""`encdec generate MODEL_DIR`: translate, summarise or continue text with a trained or downloaded model.

Reads one input per line from --input (or stdin), writes one output per input as
text lines or JSONL records, and streams the tokens of a single greedy or sampled
input to the terminal as they are decoded. MODEL_DIR is a run directory of
`encdec train` (its best checkpoint, with its own tokenizer; a seq2seq run's
source template is applied to each input) or a local Hugging Face directory (T5,
Marian, Pegasus, BART, ...; Gemma, Llama and Qwen, which continue each input as a prompt) with its tokenizer,
read with transformers' AutoTokenizer (the optional `hf` extra). --device picks where the model runs (default: a GPU when
torch sees one, else the CPU); --quantize int8 decodes there with int8 linear layers
(encdec.quantize: fbgemm's kernels on the CPU, torch._int_mm on a GPU); --compile
decodes with fixed-shape steps, compiled on the CPU and captured in CUDA graphs on a GPU
(generate's compile=True). A multilingual model's languages are its tokenizer's codes: NLLB's
`--src-lang eng_Latn --tgt-lang fra_Latn` encodes each input as English and writes French.
"""

import argparse
import io
import json
import sys
from pathlib import Path
from typing import BinaryIO, TextIO

import torch
from tqdm import tqdm

from encdec.cli.draft_model import add_draft_arguments, open_draft
from encdec.cli.held import say_unless_refused
from encdec.cli.options import (
    MAX_ROWS,
    add_checkpoint_argument,
    add_device_argument,
    add_dtype_argument,
    add_generation_options,
    add_quantize_argument,
    add_source_length_argument,
    given_generation_options,
    open_to_decode,
    resolve_device,
    whole_number,
)
from encdec.cli.output_paths import InputPath, OutputPath
from encdec.data.reading import MAX_INPUT_LINE_BYTES, open_text_file, read_input_lines
from encdec.errors import ConfigError, DataError
from encdec.generation.text_generator import TextGenerator
from encdec.quantization import quantize
from encdec.safe_paths import open_replacing, output_path


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("generate", description=__doc__)
    parser.add_argument(
        "model_dir",
        type=InputPath("the model", Path),
        help="a run directory of encdec train, or a Hugging Face model directory (T5, Marian, BART, Llama, Qwen, ...)",
    )
    parser.add_argument(
        "--input",
        "-i",
        type=InputPath("--input", stdin="-"),
        default="-",
        help="a file with one input per line (default: stdin)",
    )
    parser.add_argument(
        "--output",
        "-o",
        type=OutputPath("-o", "the file of outputs", stdout="-"),
        default="-",
        help="where to write outputs (default: stdout)",
    )
    parser.add_argument("--format", choices=("text", "jsonl"), default="text", help="one line or one record per input")
    parser.add_argument("--prefix", default="", help='text put before every input, e.g. "summarize: " for T5')
    parser.add_argument(
        "--batch-size",
        type=whole_number(1, MAX_ROWS, "--batch-size"),
        default=32,
        help="inputs decoded together (default 32, as evaluate takes them)",
    )
    parser.add_argument("--no-stream", action="store_true", help="do not stream the tokens of a single input")
    add_text_generation_arguments(parser)
    add_draft_arguments(parser)
    parser.set_defaults(func=run)


def add_text_generation_arguments(parser: argparse.ArgumentParser, defaults: dict | None = None) -> None:
    """What `encdec generate` and `encdec evaluate` both take to open a model and generate text with it:
    --checkpoint, --max-source-len, --dtype, --device, --quantize, and GenerationConfig's options over
    `defaults` (--max-new-tokens, --num-beams, --do-sample, --compile, ...)."""
    add_checkpoint_argument(parser)
    add_source_length_argument(parser)
    add_dtype_argument(parser)
    add_device_argument(parser)
    add_quantize_argument(parser)
    add_generation_options(parser, defaults)


def read_inputs(source: str, prefix: str) -> list[str]:
    """One input per line of `source` (a regular file, or '-' for stdin), `prefix` put before each.

    Lines end at "\\n" only (a form feed or U+2028 stays inside its input) and are read with bounds
    (encdec.data.reading): a FIFO, a device or an endless stream is refused, never read to its end.
    """
    if source == "-":
        lines = read_input_lines(_stdin_bytes(), "stdin")
    else:
        with open_text_file(Path(source), "input file", MAX_INPUT_LINE_BYTES, "MAX_INPUT_LINE_BYTES") as stream:
            lines = read_input_lines(stream, source)
    if not lines:
        raise DataError("there is no input: give --input FILE or write lines to stdin")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise DataError(f"input line {number} is empty")
    return [prefix + line for line in lines]


class _EncodedText:
    """A text stream read as UTF-8 bytes, line by line: stdin replaced by an io.StringIO (in tests)."""

    def __init__(self, text: TextIO):
        self.text = text

    def readline(self, size: int = -1) -> bytes:
        return self.text.readline(size).encode("utf-8")


def _stdin_bytes() -> BinaryIO:
    """stdin's bytes (its text layer would split lines at "\\r" and U+2028 too)."""
    if sys.stdin is None:
        return io.BytesIO()
    return getattr(sys.stdin, "buffer", None) or _EncodedText(sys.stdin)


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
    opened = open_to_decode(args.model_dir, args, device, args.max_source_len)
    say_unless_refused(opened.said)  # which checkpoint, and why
    generator = TextGenerator(opened.text, opened.generation)  # no tokenizer files: refused before any work
    model = opened.model.to(device)
    if args.quantize:
        model = quantize(model, args.quantize)
    draft = open_draft(args, opened, device)  # speculative decoding's, where --draft names one
    inputs = read_inputs(args.input, args.prefix)
    options = given_generation_options(args)
    out = sys.stdout if args.output == "-" else open_output(Path(args.output))
    effective = {**opened.generation, **options}  # the checkpoint may default to beams
    streaming = (
        len(inputs) == 1
        and args.format == "text"
        and out.isatty()
        and not args.no_stream
        and effective.get("num_beams", 1) == 1
        and effective.get("num_return_sequences", 1) == 1
        and effective.get("mbr") is None  # MBR's samples are chosen among once all are drawn
    )
    starts = range(0, len(inputs), args.batch_size)
    bar = not streaming and len(starts) > 1 and sys.stderr.isatty()  # on a terminal, never into a log
    try:
        for start in tqdm(starts, desc="generate", unit="batch", leave=False, disable=not bar):
            batch = inputs[start : start + args.batch_size]
            encoded = generator.encode(batch, options.get("src_lang"))
            streamer = {"streamer": stream_printer(generator.text, out)} if streaming else {}
            decoding = draft.generate if draft is not None else TextGenerator.generate
            texts = generator.decode(decoding(generator, model, encoded, **options, **streamer))
            write_outputs(out, batch, texts, args.format, streamed=streaming)
    finally:
        if out is not sys.stdout:
            out.close()
    if draft is not None:
        draft.report()
    return 0


def open_output(path: Path, flag: str = "-o") -> TextIO:
    """A new file renamed over `path` (given as `flag`) at once, open for the outputs: never written through a
    link (a symlink at `path` or on the way is refused, a hard link replaced), and never a device or a FIFO
    replaced."""
    output_path(path, flag)
    if not path.parent.is_dir():
        raise ConfigError(f"{flag} {path}: the directory {path.parent} does not exist")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{flag} {path} is not a regular file; name a file to write, or - for stdout")
    return open_replacing(path)


def write_outputs(out, inputs: list[str], texts: list[str], fmt: str, streamed: bool = False) -> None:
    """Write the outputs of `inputs` (several per input when num_return_sequences > 1)."""
    per_input = len(texts) // len(inputs)
    for i, source in enumerate(inputs):
        outputs = [text.strip() for text in texts[i * per_input : (i + 1) * per_input]]
        if fmt == "jsonl":
            record = {"input": source, "output": outputs[0] if per_input == 1 else outputs}
            line = json.dumps(record, ensure_ascii=False)  # JSON allows U+2028/9 raw; JavaScript and splitlines not
            out.write(line.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029") + "\n")
        elif streamed:
            out.write("\n")
        else:
            out.write("\n".join(outputs) + "\n")
