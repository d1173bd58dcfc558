"""Outputs generated for a list of inputs, a batch at a time: what `encdec evaluate` and the trainer's
generating evaluation score (`score_texts`) against their references."""

import time
from dataclasses import dataclass

from tqdm import tqdm

from encdec.generation.text_generator import TextGenerator


@dataclass
class Generated:
    predictions: list[str]  # one output per input, special tokens dropped, stripped
    seconds: float  # in generate, encoding and decoding left out
    new_tokens: int  # generated tokens, EOS counted and padding not


def generate_texts(
    model, text, inputs: list[str], batch_size: int = 32, progress: bool = False, **options
) -> Generated:
    """Generate an output for each of `inputs`, `batch_size` at a time. `text` encodes and decodes (a run's
    `RunTokenizer` or a Hugging Face tokenizer), through the one `TextGenerator`: inputs in `options`'
    src_lang where given, `options` to `encdec.generate` (`defaults` included)."""
    generator = TextGenerator(text, options.pop("defaults", None))
    pad_id = model.config.pad_id
    predictions, seconds, new_tokens = [], 0.0, 0
    starts = range(0, len(inputs), batch_size)
    for start in tqdm(starts, desc="generate", unit="batch", leave=False, disable=not progress):
        encoded = generator.encode(inputs[start : start + batch_size], options.get("src_lang"))
        started = time.perf_counter()
        ids = generator.generate(model, encoded, **options)
        seconds += time.perf_counter() - started
        new_tokens += int((ids[:, 1:] != pad_id).sum())
        predictions += generator.decode(ids)
    return Generated(predictions, seconds, new_tokens)
