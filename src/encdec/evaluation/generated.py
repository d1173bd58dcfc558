"""Outputs generated for a list of inputs, a batch at a time: what `encdec evaluate` and the trainer's
generating evaluation score (`score_texts`) against their references."""

import time
from dataclasses import dataclass

from tqdm import tqdm

from encdec.generation import generate
from encdec.tokenizers.languages import as_forced_token, encode_in


@dataclass
class Generated:
    predictions: list[str]  # one output per input, special tokens dropped, stripped
    seconds: float  # in generate, encoding and decoding left out
    new_tokens: int  # generated tokens, EOS counted and padding not


def generate_texts(
    model, text, inputs: list[str], batch_size: int = 32, progress: bool = False, **options
) -> Generated:
    """Generate an output for each of `inputs`, `batch_size` at a time. `text` encodes and decodes (a run's
    `RunTokenizer` or a Hugging Face tokenizer), in `options`' src_lang where given; `options` go to
    `encdec.generate` (`defaults` included), tgt_lang as the token it forces first."""
    pad_id = model.config.pad_id
    predictions, seconds, new_tokens = [], 0.0, 0
    starts = range(0, len(inputs), batch_size)
    for start in tqdm(starts, desc="generate", unit="batch", leave=False, disable=not progress):
        batch = inputs[start : start + batch_size]
        encoded = encode_in(text, batch, options.get("src_lang"), return_tensors="pt", padding=True, truncation=True)
        src_ids, src_mask = encoded["input_ids"], encoded["attention_mask"]
        started = time.perf_counter()
        ids = generate(model, src_ids, src_mask, **as_forced_token(text, options, src_ids, src_mask)).cpu()
        seconds += time.perf_counter() - started
        new_tokens += int((ids[:, 1:] != pad_id).sum())
        predictions += [output.strip() for output in text.batch_decode(ids[:, 1:], skip_special_tokens=True)]
    return Generated(predictions, seconds, new_tokens)
