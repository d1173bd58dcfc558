"""Beam-search memory: encdec.generate beside Hugging Face's generate(num_beams) on the same random-weight T5.

Run: python benchmarks/bench_beam_memory.py [--shape t5-small] [--batch 4] [--source 256] [--new 64] [--beams 4,8]
     python benchmarks/bench_beam_memory.py --family t5gemma2   # encdec's T5Gemma 2 layout alone, at --shape's widths

For each beam width, two figures per system, side by side:
  - cache MiB: what the decoding state holds once every position is written, counted from its tensors:
    encdec's decode state (each layer's self-attention cache of max_new_tokens + 1 columns, the one spare
    pair all layers' beam reorders gather into, and the cross-attention keys and values, one memory row
    per example, shared by its beams), Hugging Face's EncoderDecoderCache returned by generate (its self-attention
    keys and values, and its cross-attention ones, one per beam: generate expands the encoder output
    num_beams times before decoding);
  - peak MiB: the peak of torch's CPU allocations during one whole generate call (encoder included) above
    what was allocated before it, from torch's CPU memory profiler (torch.profiler, profile_memory=True:
    the running sum of every allocation and free it records, generate_systems.cpu_peak_mib). Not
    tracemalloc, which does not see torch's allocator.
Both models carry the same random weights (generate_systems.build_pair); every call makes exactly `--new`
tokens per example (min_new_tokens = max_new_tokens), fp32 on the CPU. With `--family t5gemma2`, encdec's
T5Gemma 2 text model alone (no transformers model beside it), random weights at the shape's widths: its decoder
attends to its own keys and the memory's in one softmax, the memory read by each example's beams together.
"""

import argparse

import torch
from generate_systems import SHAPES, build_pair, cpu_peak_mib

import encdec
from encdec.interop.t5gemma2 import t5gemma2_config

MIB = 2**20


def tensor_mib(tensors) -> float:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None) / MIB


def encdec_cache_mib(model, src, mask, beams: int, new: int) -> tuple[float, float]:
    """(self-attention, cross-attention) MiB of the decode state `start` makes for `beams` beams of `new`
    tokens, after a beam reorder has made the spare pair that reorders gather into."""
    with torch.inference_mode():
        state = model.start(src, mask, new, beams)
        state.ensure(1)
        model.step_logits(torch.zeros(state.rows, 1, dtype=torch.long), state)
        state.advance(1)
        state.reorder(torch.arange(state.rows))
    growing = [t for cache in state.bag.step for t in (cache.keys, cache.values)] + list(state.bag.spare or ())
    memory = [t for cache in state.bag.memory for t in (cache.stored_keys, cache.values)]
    return tensor_mib(growing), tensor_mib(memory)


def hf_cache_mib(reference, src, mask, beams: int, new: int) -> tuple[float, float]:
    """(self-attention, cross-attention) MiB of the cache Hugging Face's generate returns."""
    with torch.inference_mode():
        out = reference.generate(
            input_ids=src,
            attention_mask=mask,
            num_beams=beams,
            max_new_tokens=new,
            min_new_tokens=new,
            return_dict_in_generate=True,
        )
    cache = out.cache if hasattr(out, "cache") else out.past_key_values
    halves = (cache.self_attention_cache, cache.cross_attention_cache)
    return tuple(tensor_mib(t for layer in half.layers for t in (layer.keys, layer.values)) for half in halves)


def t5gemma2_model(shape: str):
    """encdec's T5Gemma 2 text model at `shape`'s widths, random weights, read from the config.json fields T5Gemma 2
    writes: merged self- and cross-attention, a window of 128 in every other layer."""
    s = SHAPES[shape]
    layers = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(s["num_decoder_layers"])]
    stack = dict(
        vocab_size=s["vocab_size"],
        hidden_size=s["d_model"],
        intermediate_size=s["d_ff"],
        num_hidden_layers=s["num_decoder_layers"],
        num_attention_heads=s["num_heads"],
        num_key_value_heads=s["num_heads"],
        head_dim=s["d_kv"],
        query_pre_attn_scalar=s["d_kv"],
        sliding_window=128,
        layer_types=layers,
    )
    torch.manual_seed(0)
    hf = {"encoder": {"text_config": stack}, "decoder": stack, "eoi_token_index": 5, "image_token_index": 7}
    return encdec.build_model(t5gemma2_config(hf)).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="t5-small", choices=sorted(SHAPES))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--source", type=int, default=256)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--beams", default="4,8")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--family", default="t5", choices=("t5", "t5gemma2"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.family == "t5gemma2":
        reference, ours = None, t5gemma2_model(args.shape)
    else:
        reference, ours = build_pair(args.shape, torch.device("cpu"), torch.float32)
    torch.manual_seed(1)
    src = torch.randint(2, SHAPES[args.shape]["vocab_size"], (args.batch, args.source))
    mask = torch.ones_like(src)
    mask[1::2, args.source // 2 :] = 0  # every other source half as long: a padded batch
    options = dict(max_new_tokens=args.new, min_new_tokens=args.new)
    print(
        f"{args.family} {args.shape}, fp32, CPU, {torch.get_num_threads()} threads: {args.batch} sources of {args.source} tokens "
        f"(every other one {args.source // 2} real), {args.new} new tokens each; torch {torch.__version__}"
    )
    print("| beams | system | self-attention cache MiB | cross-attention K/V MiB | cache MiB | peak MiB of generate |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for beams in (int(b) for b in args.beams.split(",")):
        runs = {}
        if reference is not None:
            runs["HF"] = (
                hf_cache_mib(reference, src, mask, beams, args.new),
                lambda: reference.generate(input_ids=src, attention_mask=mask, num_beams=beams, **options),
            )
        runs["encdec"] = (
            encdec_cache_mib(ours, src, mask, beams, args.new),
            lambda: encdec.generate(ours, src, mask, num_beams=beams, **options),
        )
        for name, ((growing, memory), call) in runs.items():
            with torch.inference_mode():
                call()  # warm-up: weight copies made once per model are not the call's
                peak = cpu_peak_mib(call)
            print(f"| {beams} | {name} | {growing:.1f} | {memory:.1f} | {growing + memory:.1f} | {peak:.1f} |")


if __name__ == "__main__":
    main()
