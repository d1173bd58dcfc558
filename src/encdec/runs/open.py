"""Open whatever a path holds, decided in one place: an encdec run directory, one checkpoint directory of a
run (copied anywhere: it describes itself), a Hugging Face directory or Hub id.

    model = encdec.from_pretrained("runs/dialogsum")             # the run's best checkpoint
    model = encdec.from_pretrained("models/dialogsum-step-3000") # a checkpoint directory on its own
    model = encdec.from_pretrained("checkpoints/flan-t5-small")  # T5 / Flan-T5 / mT5, BART, Marian, Qwen, ...
    model = encdec.from_pretrained("google/flan-t5-small")       # a Hub id: fetched once into HF's cache
    tokenizer = encdec.load_tokenizer("runs/dialogsum")
    opened = open_model("runs/dialogsum")                        # the model, its defaults and text encoding
    ids = opened.model.generate(**opened.text(["..."]))

The model comes back in eval mode with the checkpoint's generation defaults; the tokenizer
is encdec's interface over the run's own tokenizer or, for a Hugging Face directory, over
transformers' AutoTokenizer (`tokenizer.hf` is the HF object).
"""

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from encdec.errors import CheckpointError
from encdec.generation.interface import capabilities_of
from encdec.interop import is_hf_dir, load_hf
from encdec.interop.hub_ids import resolve_model
from encdec.runs.load import LoadedRun, check_max_source_len, checkpoint_at, load_run, refuse_choice
from encdec.runs.model_dtype import cast_to, dtype_named, stored_dtype
from encdec.runs.run_dir import CheckpointDir, RunDir
from encdec.runs.speech_text import input_encoding
from encdec.tokenizers import Tokenizer
from encdec.tokenizers import load_tokenizer as load_tokenizer_dir

MAX_SOURCE_LEN = 1 << 16  # above this, a Hugging Face tokenizer's model_max_length means "not set"


def model_kind(path: Path, label: str = "") -> Literal["run", "checkpoint", "hf"]:
    """ "run" for a run directory of encdec train, "checkpoint" for one of its checkpoint directories (in its
    run or copied out of it), "hf" for a Hugging Face model directory, else one sentence (CheckpointError)
    starting with `label` (the option that named the path, if any)."""
    if RunDir(path).is_run():
        return "run"
    if CheckpointDir(path).is_checkpoint():
        return "checkpoint"
    if is_hf_dir(path):
        return "hf"
    why = (
        "it has no checkpoints/latest and has no config.json, nor a checkpoint's model.json"
        if path.is_dir()
        else "it is not a directory"
    )
    raise CheckpointError(
        f"{label}{path} is neither a run directory with checkpoints nor a Hugging Face model directory "
        f"nor a checkpoint directory: {why}"
    )


@dataclass
class OpenedModel:
    """A model opened for use: what `encdec generate`, `evaluate` and `export` start from."""

    model: nn.Module  # in eval mode, carrying `generation` as its generation_defaults
    generation: dict[str, Any]  # the generation defaults the checkpoint carries
    path: Path
    run: LoadedRun | None = None  # a run's checkpoint: its description, tokenizer and text encoding
    max_source_len: int | None = None  # inputs cut to this many tokens; None: what the model was trained with
    preferred: bool = False  # stored in float32, opened in open_model's `prefer` dtype (a CPU's native bf16)

    @property
    def said(self) -> str:
        """What was opened, and for a run which checkpoint and why, as a command says it."""
        if self.run is None:
            what = f"model: {self.path} (a Hugging Face directory)"
        elif self.run.checkpoint.path == self.path:
            what = f"model: {self.path} ({self.run.chosen})"
        else:
            what = f"model: {self.path}, checkpoint {self.run.checkpoint.name} ({self.run.chosen})"
        if self.preferred:
            what += f"; decoding in {str(next(self.model.parameters()).dtype).removeprefix('torch.')}, which this "
            what += "CPU multiplies natively (--dtype float32 keeps its float32)"
        return what

    @cached_property
    def text(self):
        """The model's text encoder, Hugging Face's tokenizer interface: a run's `RunTokenizer`, or a Hugging
        Face directory's own tokenizer (refused in one sentence without tokenizer files), made when first asked."""
        return self.run.text if self.run is not None else input_encoding(self.model.config, hf_text_encoder(self))


def open_model(
    path: str | Path,
    checkpoint: str | None = None,
    max_source_len: int | None = None,
    dtype: str | torch.dtype = "auto",
    prefer: torch.dtype | None = None,
) -> OpenedModel:
    """The model at `path`: checkpoint `checkpoint` ("best", "latest" or a step directory name; None: the best) of
    a run directory, or a checkpoint directory, a Hugging Face directory or Hub id (org/name[@revision]), which
    hold no checkpoints to choose (a `checkpoint` named for them is refused); in `dtype`, "auto" being the dtype
    its weights were stored in (runs.model_dtype), except that with `prefer` (a decoding command's choice on a CPU
    that multiplies bf16 natively: runs.model_dtype.native_dtype) "auto" opens a float32 model in `prefer`."""
    asked = dtype_named(dtype)  # a bad name is refused before anything is read
    path = resolve_model(path)
    kind = model_kind(path)
    if kind in ("run", "checkpoint"):
        run = load_run(path, checkpoint, max_source_len)
        weights = run.checkpoint.path / CheckpointDir.MODEL
        chosen, preferred = opened_dtype(asked, stored_dtype(weights.parent, weights), prefer)
        cast_to(run.model, chosen)
        return OpenedModel(run.model, run.generation, path, run, max_source_len, preferred)
    refuse_choice(checkpoint, path, "a Hugging Face model directory")
    model = load_hf(path)
    check_max_source_len(max_source_len, model.config)
    chosen, preferred = opened_dtype(asked, stored_dtype(path), prefer)
    cast_to(model, chosen)
    return OpenedModel(model.eval(), model.generation_defaults, path, None, max_source_len, preferred)


def opened_dtype(
    asked: torch.dtype | None, stored: torch.dtype, prefer: torch.dtype | None
) -> tuple[torch.dtype, bool]:
    """(the dtype a model opens in, whether that is `prefer` in place of its stored float32)."""
    if asked is not None:
        return asked, False
    if prefer is not None and stored == torch.float32:
        return prefer, prefer != stored
    return stored, False


def hf_text_encoder(opened: OpenedModel):
    """A Hugging Face directory's AutoTokenizer, cutting inputs to `max_source_len` or else to what the
    tokenizer says the model takes (the model's position table where it says nothing); padding on the left
    for a causal model (Llama, Qwen), whose prompts continue at their last column."""
    from encdec.tokenizers.pretrained import PretrainedTokenizer

    tokenizer = PretrainedTokenizer.from_directory(opened.path).hf
    if capabilities_of(opened.model).pads_left:
        tokenizer.padding_side = "left"
    if opened.max_source_len is not None:
        tokenizer.model_max_length = opened.max_source_len
    elif tokenizer.model_max_length > MAX_SOURCE_LEN:  # transformers' "no limit" is a huge number
        tokenizer.model_max_length = getattr(opened.model.config, "max_positions", MAX_SOURCE_LEN)
    return tokenizer


def from_pretrained(
    path: str | Path,
    checkpoint: str | None = None,
    device: str | torch.device | None = None,
    quantize: str | None = None,
    dtype: str | torch.dtype = "auto",
) -> nn.Module:
    """The model at `path` in eval mode (on `device` if given). `checkpoint` picks a run's
    checkpoint: "best" (None's), "latest" or a step directory name; `dtype` "auto" keeps the dtype the weights were
    stored in (a bf16 Hugging Face checkpoint stays bf16, as in transformers), or names one ("float32",
    "bfloat16", "float16", their short names, or a torch dtype); `quantize="int8"` returns it with
    int8 linear layers, quantized on `device` (the CPU, fp32 weights only, or a CUDA GPU; see encdec.quantize)."""
    model = open_model(path, checkpoint, dtype=dtype).model
    if device is not None:
        model.to(device)
    if quantize is not None:
        from encdec.quantization import quantize as quantize_model

        model = quantize_model(model, quantize)
    return model.eval()


def load_tokenizer(path: str | Path, checkpoint: str | None = None) -> Tokenizer:
    """The tokenizer at `path`: a run directory's or a checkpoint directory's, a Hugging Face directory's
    (AutoTokenizer), or a tokenizer directory an encdec tokenizer saved itself into, or a Hub id
    (org/name[@revision])."""
    path = resolve_model(path)
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory")
    if RunDir(path).is_run() or CheckpointDir(path).is_checkpoint():
        return load_tokenizer_dir(checkpoint_at(path, checkpoint).tokenizer)
    refuse_choice(checkpoint, path, "a Hugging Face model or tokenizer directory")
    return load_tokenizer_dir(path)
