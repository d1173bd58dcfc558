"""Load whatever a path holds: an encdec run directory or a local Hugging Face model directory.

    model = encdec.from_pretrained("runs/dialogsum")          # the run's best checkpoint
    model = encdec.from_pretrained("checkpoints/flan-t5-small")  # T5 / Flan-T5 / mT5, BART, Marian
    tokenizer = encdec.load_tokenizer("runs/dialogsum")
    ids = model.generate(tokenizer.encode(["..."], add_eos=True) ...)

The model comes back in eval mode with the checkpoint's generation defaults; the
tokenizer is encdec's interface over the run's own tokenizer or, for a Hugging Face
directory, over transformers' AutoTokenizer (`tokenizer.hf` is the HF object).
"""

from pathlib import Path

import torch
from torch import nn

from encdec.errors import CheckpointError
from encdec.tokenizers import Tokenizer


def from_pretrained(
    path: str | Path, checkpoint: str = "best", device: str | torch.device | None = None, quantize: str | None = None
) -> nn.Module:
    """The model at `path` in eval mode (on `device` if given). `checkpoint` picks a run's
    checkpoint: "best", "latest" or a step directory name; `quantize="int8"` returns it with
    int8 linear layers, quantized on `device` (the CPU, fp32 weights only, or a CUDA GPU; see encdec.quantize)."""
    from encdec.interop import load_hf
    from encdec.training.run import load_run
    from encdec.training.run_dir import RunDir

    path = Path(path)
    if RunDir(path).is_run():
        model = load_run(path, checkpoint).model
    elif (path / "config.json").is_file():
        model = load_hf(path)
    else:
        raise CheckpointError(
            f"{path} is neither an encdec run directory (checkpoints/) nor a Hugging Face model directory (config.json)"
        )
    if device is not None:
        model.to(device)
    if quantize is not None:
        from encdec.quantization import quantize as quantize_model

        model = quantize_model(model, quantize)
    return model.eval()


def load_tokenizer(path: str | Path, checkpoint: str = "best") -> Tokenizer:
    """The tokenizer at `path`: a run directory's, a Hugging Face directory's (AutoTokenizer), or a
    tokenizer directory an encdec tokenizer saved itself into."""
    from encdec.tokenizers import load_tokenizer as load_tokenizer_dir
    from encdec.training.run_dir import RunDir

    path = Path(path)
    if RunDir(path).is_run():
        return load_tokenizer_dir(RunDir(path).checkpoint(checkpoint).tokenizer)
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory")
    return load_tokenizer_dir(path)
