"""`encdec demo`: a short tour of the model API on one real sentence.

Lists the presets with their parameter counts, builds one, encodes a TinyStories
sentence with the byte tokenizer, trains the model briefly to copy it (a denoising
toy task), and decodes greedily with `encdec.generate` through the KV cache,
checking the cached logits against a full recomputation. The trainer (`encdec
train`) is the real main job.
"""

import gzip
import time
from pathlib import Path

import torch
from torch import nn

from encdec.cli.options import whole_number
from encdec.generation import generate
from encdec.models import build_model, count_parameters, count_parameters_of, preset, preset_names
from encdec.tokenizers.byte import ByteTokenizer

MAX_DEMO_STEPS = 100_000  # a tour: the copy task is learnt in 150
FALLBACK = "Once upon a time, there was a little girl named Lily."
SHARED_STORIES = Path(__file__).resolve().parents[3].parent / "shared/data/tinystories/tinystories_train_head.txt.gz"


def add_parser(subparsers):
    parser = subparsers.add_parser("demo", description=__doc__)
    seq2seq = [name for name in preset_names() if preset(name).family == "encoder_decoder"]  # what the tour drives
    parser.add_argument("--preset", default="rot5-tiny", choices=seq2seq, help="model to build")
    parser.add_argument(
        "--steps", type=whole_number(1, MAX_DEMO_STEPS, "--steps"), default=150, help="training steps of the copy task"
    )
    parser.set_defaults(func=run)


def first_sentence() -> str:
    if not SHARED_STORIES.is_file():
        return FALLBACK
    with gzip.open(SHARED_STORIES, "rt", encoding="utf-8") as f:
        return f.readline().split(".")[0].strip() + "."


def print_presets() -> None:
    print(f"{'preset':<22}{'parameters':>14}{'without positions':>20}")
    for name in preset_names():
        count = count_parameters_of(preset(name))  # the preset's own family, as training builds it, on meta
        print(f"{name:<22}{count.total:>14,}{count.without_positions:>20,}")


@torch.no_grad()
def greedy_decode(model: nn.Module, src: torch.Tensor, max_new: int) -> list[int]:
    """Greedy `encdec.generate` through the KV cache, its step logits checked against one full forward."""
    out = generate(model, src, max_new_tokens=max_new, return_dict_in_generate=True, output_scores=True)
    full = model(src, out.sequences[:, :-1]).logits  # all steps recomputed at once, no cache
    if not torch.allclose(torch.stack(out.scores, dim=1), full, atol=1e-4):
        raise RuntimeError("cached decoding diverged from the full forward")
    return out.sequences[0, 1:].tolist()


def run(args) -> int:
    torch.set_num_threads(1)  # a 0.2M-parameter model: more threads only wait on each other, and on a
    # machine shared with another job 2 threads trained 5x slower than 1 (12.4 s against 2.4 s)
    print_presets()
    tokenizer = ByteTokenizer()
    text = first_sentence()
    cfg = preset(
        args.preset,
        vocab_size=tokenizer.vocab_size,
        dropout=0.0,
        pad_id=tokenizer.pad_id,
        eos_id=tokenizer.eos_id,
        decoder_start_id=tokenizer.decoder_start_id,
    )
    torch.manual_seed(0)
    model = build_model(cfg)
    print(f"\n{args.preset}: {count_parameters(model):,} parameters; sentence: {text!r}")

    ids = tokenizer.encode([text], add_eos=True)[0]
    src = torch.tensor([ids])
    labels = src.clone()
    tgt = torch.cat([torch.tensor([[cfg.decoder_start_id]]), labels[:, :-1]], dim=1)  # shifted right
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = model(src, tgt, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 1 or step % 50 == 0:
            print(f"step {step:4d}  copy loss {loss.item():.4f}")
    print(f"trained {args.steps} steps in {time.perf_counter() - started:.1f}s")

    model.eval()
    out = greedy_decode(model, src, max_new=len(ids) + 4)
    print(f"greedy, cached (checked against full recomputation): {tokenizer.decode([out])[0]!r}")
    return 0
