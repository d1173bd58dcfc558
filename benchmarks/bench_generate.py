"""Generation benchmark: encdec.generate beside Hugging Face's generate() on the same random-weight T5.

Run: python benchmarks/bench_generate.py [--repeats 5] [--threads N]

The model is a T5 v1.0 layout with d_model 256, 4 heads of 64, d_ff 1024, 4 encoder
and 4 decoder layers and a vocabulary of 8192; the batch is 8 sources of 256
tokens; every run makes exactly 64 new tokens per example (min_new_tokens =
max_new_tokens = 64 on both sides). For greedy, beam search (4 beams) and
sampling it prints new tokens per second (examples x 64 / wall time, encoder
included) for both, the ratio, and checks that greedy and beam outputs are equal.
Runs alternate between the libraries and the table shows medians. With
`ctranslate2` installed (`pip install ctranslate2`, or the `bench` extra), the same
weights converted by its TransformersConverter run too, in fp32 and int8, in the same
interleaved loop (its intra-op threads set to torch's), with its greedy and beam
tokens checked against Hugging Face's.

A second table bounds what any implementation could reach on this machine: it
replays only the matrix products and attention kernels of one generate call (the
model's own weights, the same shapes, each product on the faster of torch's two CPU
kernels, F.linear or oneDNN with a prepacked weight) and none of the other
operations (norms, activations, residuals, embedding, cache writes, search).
"""

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
import transformers

import encdec
import encdec.modules.decoding_linear as decoding

SHAPE = dict(vocab_size=8192, d_model=256, d_kv=64, num_heads=4, d_ff=1024, num_layers=4, num_decoder_layers=4)
BATCH, SOURCE, NEW = 8, 256, 64
MODES = {
    "greedy": dict(),
    "beam 4": dict(num_beams=4),
    "sampling": dict(do_sample=True, top_k=50, top_p=0.95),
}


def build_pair():
    config = transformers.T5Config(**SHAPE, feed_forward_proj="relu", decoder_start_token_id=0)
    torch.manual_seed(0)
    reference = transformers.T5ForConditionalGeneration(config).eval()
    with tempfile.TemporaryDirectory() as path:
        reference.save_pretrained(path)
        ours = encdec.load_hf(path)
    return reference, ours


def ctranslate2_models(reference, threads: int) -> dict:
    """{"ct2": fp32 Translator, "ct2 int8": int8 Translator} of the same weights; {} without ctranslate2.

    Its converter reads the vocabulary from a tokenizer, so a word-level one of ids "t0".."tN" is saved
    beside the weights; tokens are passed to CTranslate2 as those strings."""
    try:
        import ctranslate2
    except ImportError:
        return {}
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(SHAPE["vocab_size"])}
    for i, name in enumerate(("<pad>", "</s>", "<unk>")):
        del vocab[f"t{i}"]
        vocab[name] = i
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, "<unk>")),
                                                     pad_token="<pad>", eos_token="</s>", unk_token="<unk>")  # fmt: skip
    translators, root = {}, tempfile.mkdtemp()
    reference.save_pretrained(f"{root}/hf")
    tokenizer.save_pretrained(f"{root}/hf")
    for name, quantization in (("ct2", None), ("ct2 int8", "int8")):
        out = f"{root}/{name.replace(' ', '_')}"
        ctranslate2.converters.TransformersConverter(f"{root}/hf").convert(out, quantization=quantization)
        translators[name] = ctranslate2.Translator(out, device="cpu", inter_threads=1, intra_threads=threads)
    translators["tokens"] = {i: t for t, i in vocab.items()}, vocab
    return translators


def timed(fn) -> tuple[float, torch.Tensor]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def ct2_call(translator, names: tuple, src, options: dict):
    """CTranslate2's translate_batch with generate()'s options; returns token ids with the start column."""
    to_token, to_id = names
    batch = [[to_token[int(i)] for i in row] for row in src]
    kwargs = dict(max_decoding_length=NEW, min_decoding_length=NEW, beam_size=options.get("num_beams", 1))
    if options.get("do_sample"):
        kwargs.update(sampling_topk=options.get("top_k", 50), sampling_topp=options.get("top_p", 1.0), beam_size=1)
    results = translator.translate_batch(batch, **kwargs)
    return torch.tensor([[0] + [to_id[t] for t in r.hypotheses[0]] for r in results])


def run_mode(reference, ours, src, mask, options: dict, repeats: int, ct2: dict | None = None) -> dict:
    options = dict(options, max_new_tokens=NEW, min_new_tokens=NEW)
    seeded = options.get("do_sample", False)
    others = {name: (lambda t=t: ct2_call(t, ct2["tokens"], src, options))
              for name, t in (ct2 or {}).items() if name != "tokens"}  # fmt: skip

    def hf():
        if seeded:
            torch.manual_seed(0)
        with torch.inference_mode():
            return reference.generate(input_ids=src, attention_mask=mask, **options)

    def ed():
        return encdec.generate(ours, src, mask, **options, **({"seed": 0} if seeded else {}))

    runs = {"encdec": ed, "hf": hf, **others}
    for fn in runs.values():
        fn()  # warm-up
    times = {name: [] for name in runs}
    outputs = {}
    for _ in range(repeats):
        for name, fn in runs.items():
            seconds, outputs[name] = timed(fn)
            times[name].append(seconds)
    assert outputs["hf"].shape[1] == outputs["encdec"].shape[1] == NEW + 1
    median = {name: statistics.median(t) for name, t in times.items()}
    result = {name: BATCH * NEW / median[name] for name in runs}
    result["equal"] = torch.equal(outputs["hf"], outputs["encdec"]) if not seeded else None
    if "ct2" in outputs and not seeded:
        result["ct2 equal"] = torch.equal(outputs["hf"], outputs["ct2"])
    return result


def fastest_linear(x: torch.Tensor, weight: torch.Tensor):
    """The faster of F.linear and oneDNN's linear on a prepacked weight, for x's shape: a function of x."""

    def plain(x):
        return F.linear(x, weight)

    if not decoding.ONEDNN:
        return plain
    packed_weight = decoding.reordered(weight)

    def packed(x):
        return decoding.onednn_linear(x, packed_weight)

    def seconds(fn) -> float:
        return statistics.median(timed(lambda: fn(x))[0] for _ in range(20))

    return min((plain, packed), key=seconds)


def kernel_floor(ours, beams: int, repeats: int) -> float:
    """Seconds for the matrix products and attention kernels of one generate call with `beams` rows per
    example, replayed in order on the model's weights with nothing else (median of `repeats`)."""
    cfg = ours.config
    H, D, C, S, R = cfg.n_heads, cfg.head_dim, cfg.d_model, SOURCE, BATCH * beams
    src_x, src_h = torch.randn(BATCH * S, C), torch.randn(BATCH * S, cfg.d_ff)
    step_x, step_h = torch.randn(R, C), torch.randn(R, cfg.d_ff)
    heads = torch.randn(BATCH, H, S, D)
    bias = torch.randn(1, H, S, S)
    cross_q = torch.randn(BATCH, H, beams, D)  # the beams of one example query its keys together
    self_kv = torch.randn(R, H, NEW + 1, D)

    def linears(x, *layers):
        return [fastest_linear(x, layer.weight) for layer in layers]

    encoder = [(linears(src_x, b.self_attn.q, b.self_attn.k, b.self_attn.v, b.self_attn.o),
                linears(src_x, b.ffn.wi)[0], linears(src_h, b.ffn.wo)[0]) for b in ours.encoder.blocks]  # fmt: skip
    cross_kv = [linears(src_x, b.cross_attn.k, b.cross_attn.v) for b in ours.decoder.blocks]
    decoder = [(linears(step_x, b.self_attn.q, b.self_attn.k, b.self_attn.v, b.self_attn.o, b.cross_attn.q,
                        b.cross_attn.o), linears(step_x, b.ffn.wi)[0], linears(step_h, b.ffn.wo)[0])
               for b in ours.decoder.blocks]  # fmt: skip
    head = fastest_linear(step_x, ours.embed.weight)
    cross_k, cross_v = torch.randn(BATCH, H, S, D), torch.randn(BATCH, H, S, D)

    def replay():
        with torch.inference_mode():
            for projections, up, down in encoder:
                for p in projections:
                    p(src_x)
                F.scaled_dot_product_attention(heads, heads, heads, attn_mask=bias, scale=1.0)
                up(src_x), down(src_h)
            for k, v in cross_kv:
                k(src_x), v(src_x)
            for t in range(1, NEW + 1):
                for projections, up, down in decoder:
                    for p in projections:
                        p(step_x)
                    kv = self_kv[:, :, :t]
                    F.scaled_dot_product_attention(step_x.view(R, H, 1, D), kv, kv, attn_mask=bias[:, :, :1, :t],
                                                   scale=1.0)  # fmt: skip
                    F.scaled_dot_product_attention(cross_q, cross_k, cross_v, scale=1.0)
                    up(step_x), down(step_h)
                head(step_x)

    replay()
    return statistics.median(timed(replay)[0] for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per library and mode (median shown)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--no-ctranslate2", action="store_true", help="leave CTranslate2 out even if installed")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    reference, ours = build_pair()
    torch.manual_seed(1)
    src = torch.randint(2, SHAPE["vocab_size"], (BATCH, SOURCE))
    mask = torch.ones(BATCH, SOURCE, dtype=torch.long)
    print(f"T5 d_model 256, 4+4 layers, vocab 8192; batch {BATCH} x {SOURCE} source tokens, {NEW} new tokens; "
          f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads, "
          f"median of {args.repeats}")  # fmt: skip
    ct2 = {} if args.no_ctranslate2 else ctranslate2_models(reference, torch.get_num_threads())
    extra = "| CT2 fp32 tokens/s | CT2 int8 tokens/s | encdec / CT2 fp32 | CT2 same tokens " if ct2 else ""
    print(f"| {'mode':<9} | {'HF tokens/s':>11} | {'encdec tokens/s':>15} | {'ratio':>6} | same tokens {extra}|")
    print(f"|{'-' * 11}|{'-' * 13}|{'-' * 17}|{'-' * 8}|-------------|" + ("---:|---:|---:|---|" if ct2 else ""))
    results = {}
    for mode in args.modes:
        r = results[mode] = run_mode(reference, ours, src, mask, MODES[mode], args.repeats, ct2)
        same = {True: "yes", False: "NO", None: "n/a (seeded)"}[r["equal"]]
        row = f"| {mode:<9} | {r['hf']:>11.1f} | {r['encdec']:>15.1f} | {r['encdec'] / r['hf']:>5.2f}x | {same} |"
        if ct2:
            ct2_same = {True: "yes", False: "NO", None: "n/a (seeded)"}[r.get("ct2 equal")]
            row += f" {r['ct2']:.1f} | {r['ct2 int8']:.1f} | {r['encdec'] / r['ct2']:.2f}x | {ct2_same} |"
        print(row)
    print("\nKernels alone: the matrix products and attention of one call and nothing else, each on torch's faster "
          "CPU kernel (a bound for any implementation built on them)")  # fmt: skip
    print(f"| {'mode':<9} | {'HF ms':>7} | {'encdec ms':>9} | {'kernels ms':>10} | {'HF ms / 3':>9} | kernels' ratio to HF |")
    print(f"|{'-' * 11}|{'-' * 9}|{'-' * 11}|{'-' * 12}|{'-' * 11}|----------------------|")
    for mode, r in results.items():
        hf_ms, ed_ms = BATCH * NEW / r["hf"] * 1e3, BATCH * NEW / r["encdec"] * 1e3
        floor_ms = kernel_floor(ours, MODES[mode].get("num_beams", 1), args.repeats) * 1e3
        print(f"| {mode:<9} | {hf_ms:>7.1f} | {ed_ms:>9.1f} | {floor_ms:>10.1f} | {hf_ms / 3:>9.1f} | "
              f"{hf_ms / floor_ms:>19.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
