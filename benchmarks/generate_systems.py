"""The systems benchmarks/bench_generate.py times, built from one random-weight T5, and its kernel floor.

Every system is a function (src, mask, options) -> token ids (B, 1 + new) on the CPU, the
start column included: Hugging Face's generate(), encdec.generate on the same weights
(loaded through encdec.load_hf), encdec on an int8 copy (encdec.quantize), and
CTranslate2 on the same weights converted by its TransformersConverter, run in a process of
its own (benchmarks/ct2_worker.py says why).

Shapes: B batch, S source length, N new tokens, C model dim, H heads, D head dim.
"""

import copy
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers

import encdec
import encdec.modules.decoding_linear as decoding
from encdec.modules.attention import attend_transposed

SHAPES = {  # T5 v1.0 layouts (ReLU, tied embeddings); "small" is the CPU table's shape in docs/benchmarks.md
    "small": dict(vocab_size=8192, d_model=256, d_kv=64, num_heads=4, d_ff=1024, num_layers=4, num_decoder_layers=4),
    # small enough that a server's step is bound by the host's work around it (benchmarks/bench_serve.py)
    "host": dict(vocab_size=1024, d_model=64, d_kv=16, num_heads=4, d_ff=256, num_layers=2, num_decoder_layers=2),
    "t5-small": dict(
        vocab_size=32128, d_model=512, d_kv=64, num_heads=8, d_ff=2048, num_layers=6, num_decoder_layers=6
    ),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
CT2_COMPUTE = {"fp32": "float32", "bf16": "bfloat16"}


def build_pair(shape: str, device: torch.device, dtype: torch.dtype):
    """Hugging Face's T5 and encdec's, the same random weights, in eval mode on `device` in `dtype`."""
    config = transformers.T5Config(**SHAPES[shape], feed_forward_proj="relu", decoder_start_token_id=0)
    torch.manual_seed(0)
    reference = transformers.T5ForConditionalGeneration(config).eval()
    with tempfile.TemporaryDirectory() as path:
        reference.save_pretrained(path)
        ours = encdec.load_hf(path)
    return reference.to(device, dtype), ours.to(device, dtype).eval()


def int8_copy(ours):
    """encdec's model with int8 linear layers (fbgemm on the CPU, fp32 only; torch._int_mm on CUDA)."""
    return encdec.quantize(copy.deepcopy(ours), "int8")


def hf_system(reference):
    def run(src, mask, options):
        if options.get("do_sample"):
            torch.manual_seed(0)
        with torch.inference_mode():
            return reference.generate(input_ids=src, attention_mask=mask, **options).cpu()

    return run


def encdec_system(model, **extra):
    """encdec.generate on `model` with `extra` options (compile=True, say)."""

    def run(src, mask, options):
        seed = {"seed": 0} if options.get("do_sample") else {}
        return encdec.generate(model, src, mask, **options, **seed, **extra).cpu()

    return run


def ctranslate2_systems(reference, device: torch.device, dtype: str, threads: int) -> dict:
    """{"ct2": system[, "ct2 int8": system on the CPU]} of the same weights, each where this build of
    CTranslate2 supports its compute type on `device`; {} without ctranslate2.

    The weights are converted here; each system runs in a process of its own (benchmarks/ct2_worker.py),
    since CTranslate2 and torch slow each other down in one process. Its converter reads the vocabulary
    from a tokenizer, so a word-level one of ids "t0".."tN" is saved beside the weights; tokens are passed
    to CTranslate2 as those strings."""
    try:
        import ctranslate2.converters
    except ImportError:
        return {}
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(reference.config.vocab_size)}
    for i, name in enumerate(("<pad>", "</s>", "<unk>")):
        del vocab[f"t{i}"]
        vocab[name] = i
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, "<unk>")),
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
    )
    names = {i: t for t, i in vocab.items()}, vocab
    computes = {"ct2": CT2_COMPUTE[dtype]} if device.type == "cuda" else {"ct2": CT2_COMPUTE[dtype], "ct2 int8": "int8"}
    systems = {}
    with tempfile.TemporaryDirectory() as root:  # each worker has read the model once it is ready
        reference.float().save_pretrained(f"{root}/hf")  # converted from fp32; CTranslate2 casts at load
        reference.to(DTYPES[dtype])
        tokenizer.save_pretrained(f"{root}/hf")
        ctranslate2.converters.TransformersConverter(f"{root}/hf").convert(f"{root}/ct2")
        for name, compute_type in computes.items():
            worker = Ct2Worker(f"{root}/ct2", device.type, compute_type, threads)
            if worker.error is None:
                systems[name] = ct2_system(worker, names)
            else:  # e.g. no bfloat16 on most CPUs
                print(f"{name} left out: {worker.error}", file=sys.stderr)
    return systems


class Ct2Worker:
    """A CTranslate2 Translator in its own process (benchmarks/ct2_worker.py), asked by pickle over its pipes.
    `error` is None once it is ready, else why it cannot run. The process ends with this object."""

    def __init__(self, model_dir: str, device: str, compute_type: str, threads: int):
        command = [
            sys.executable,
            str(Path(__file__).with_name("ct2_worker.py")),
            model_dir,
            device,
            compute_type,
            str(threads),
        ]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        weakref.finalize(self, stop_process, self.process)
        self.error = self._receive()

    def translate(self, batch: list[list[str]], **kwargs) -> list[list[str]]:
        """translate_batch(batch, **kwargs): the best hypothesis of each example."""
        pickle.dump((batch, kwargs), self.process.stdin)
        self.process.stdin.flush()
        return self._receive()

    def _receive(self):
        try:
            return pickle.load(self.process.stdout)
        except EOFError:
            raise RuntimeError(f"the CTranslate2 worker ended (exit status {self.process.wait()})") from None


def stop_process(process: subprocess.Popen) -> None:
    process.stdin.close()  # the worker returns at the end of its input
    process.wait()


def ct2_system(worker: Ct2Worker, names: tuple):
    """CTranslate2's translate_batch with generate()'s options; returns token ids with the start column."""
    to_token, to_id = names

    def run(src, mask, options):
        rows = (
            src.cpu() if mask is None else [row[kept.bool()] for row, kept in zip(src.cpu(), mask.cpu())]
        )  # no padding
        batch = [[to_token[int(i)] for i in row] for row in rows]
        new = options["max_new_tokens"]
        kwargs = dict(max_decoding_length=new, min_decoding_length=new, beam_size=options.get("num_beams", 1))
        if options.get("do_sample"):
            kwargs.update(sampling_topk=options.get("top_k", 50), sampling_topp=options.get("top_p", 1.0), beam_size=1)
        hypotheses = worker.translate(batch, **kwargs)
        return torch.tensor([[0] + [to_id[t] for t in tokens] for tokens in hypotheses])

    run.worker = worker
    return run


def cpu_peak_mib(fn) -> float:
    """The peak of torch's CPU allocations during fn(), above what was allocated before it, in MiB: the
    running sum of every allocation and free the profiler records, in time order (the profiler's own
    overhead makes this call untimed)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    changes = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    held = peak = 0
    for _, nbytes in changes:
        held += nbytes
        peak = max(peak, held)
    return peak / 2**20


def timed(fn) -> tuple[float, torch.Tensor]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def fastest(candidates, *args):
    """The candidate function that runs fastest on `args` (median of 20 calls each)."""

    def seconds(fn) -> float:
        return statistics.median(timed(lambda: fn(*args))[0] for _ in range(20))

    return min(candidates, key=seconds)


def fastest_linear(x: torch.Tensor, weight: torch.Tensor):
    """The fastest of F.linear, BLAS on a transposed copy of the weight and oneDNN's linear on a prepacked
    one, for x's shape: a function of x."""
    weight_t = weight.t().contiguous()
    candidates = [lambda x: F.linear(x, weight), lambda x: torch.mm(x, weight_t)]
    if decoding.ONEDNN:
        packed_weight = decoding.reordered(weight)
        candidates.append(lambda x: decoding.onednn_linear(x, packed_weight))
    return fastest(candidates, x)


def fastest_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, k_t: torch.Tensor):
    """The fastest of SDPA and encdec's two batched products around a softmax (attend_transposed) for these
    shapes, the products reading the keys k (B, H, S, D) or their copy laid out transposed, k_t (B, H, D, S):
    a function of (q, k, v, mask, k_t)."""

    def sdpa(q, k, v, mask, k_t):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)

    def products(q, k, v, mask, k_t):
        return attend_transposed(q, k.transpose(-1, -2), v, mask, scale=1.0)

    def products_t(q, k, v, mask, k_t):
        return attend_transposed(q, k_t, v, mask, scale=1.0)

    return fastest([sdpa, products, products_t], q, k, v, mask, k_t)


def kernel_floor(ours, batch: int, source: int, new: int, beams: int, repeats: int) -> float:
    """Seconds for the matrix products and attention kernels of one CPU fp32 generate call with `beams`
    rows per example, replayed in order on the model's weights with nothing else (median of `repeats`):
    each on the fastest of torch's kernels for it, each layer's cross-attention on keys and values of its
    own, as a model's are. The self-attention's kernel is chosen at half the new length."""
    cfg = ours.config
    H, D, C, S, R = cfg.n_heads, cfg.head_dim, cfg.d_model, source, batch * beams
    src_x, src_h = torch.randn(batch * S, C), torch.randn(batch * S, cfg.d_ff)
    step_x, step_h = torch.randn(R, C), torch.randn(R, cfg.d_ff)
    heads = torch.randn(batch, H, S, D)
    bias = torch.randn(1, H, S, S)
    cross_q = torch.randn(batch, H, beams, D)  # the beams of one example query its keys together
    self_kv = torch.randn(R, H, new + 1, D)
    self_kv_t = self_kv.transpose(-1, -2).contiguous()  # (R, H, D, new + 1): a cache kept transposed
    self_q = step_x.view(R, H, 1, D)

    def linears(x, *layers):
        return [fastest_linear(x, layer.weight) for layer in layers]

    encoder = [
        (
            linears(src_x, b.self_attn.q, b.self_attn.k, b.self_attn.v, b.self_attn.o),
            linears(src_x, b.ffn.wi)[0],
            linears(src_h, b.ffn.wo)[0],
        )
        for b in ours.encoder.blocks
    ]
    cross_kv = [linears(src_x, b.cross_attn.k, b.cross_attn.v) for b in ours.decoder.blocks]
    decoder = [
        (
            linears(step_x, b.self_attn.q, b.self_attn.k, b.self_attn.v, b.self_attn.o, b.cross_attn.q, b.cross_attn.o),
            linears(step_x, b.ffn.wi)[0],
            linears(step_h, b.ffn.wo)[0],
        )
        for b in ours.decoder.blocks
    ]
    head = fastest_linear(step_x, ours.embed.weight)
    cross = [(torch.randn(batch, H, S, D), torch.randn(batch, H, S, D)) for _ in ours.decoder.blocks]
    cross = [(k, v, k.transpose(-1, -2).contiguous()) for k, v in cross]  # (B, H, S, D), and (B, H, D, S)
    cross_attention = fastest_attention(cross_q, *cross[0][:2], None, cross[0][2])
    half = new // 2 + 1
    kv = self_kv[:, :, :half]
    self_attention = fastest_attention(self_q, kv, kv, bias[:, :, :1, :half], self_kv_t[..., :half])
    heads_t = heads.transpose(-1, -2).contiguous()
    encoder_attention = fastest_attention(heads, heads, heads, bias, heads_t)

    def replay():
        with torch.inference_mode():
            for projections, up, down in encoder:
                for p in projections:
                    p(src_x)
                encoder_attention(heads, heads, heads, bias, heads_t)
                up(src_x), down(src_h)
            for k, v in cross_kv:
                k(src_x), v(src_x)
            for t in range(1, new + 1):
                for (projections, up, down), (cross_k, cross_v, cross_k_t) in zip(decoder, cross):
                    for p in projections:
                        p(step_x)
                    kv = self_kv[:, :, :t]
                    self_attention(self_q, kv, kv, bias[:, :, :1, :t], self_kv_t[..., :t])
                    cross_attention(cross_q, cross_k, cross_v, None, cross_k_t)
                    up(step_x), down(step_h)
                head(step_x)

    replay()
    return statistics.median(timed(replay)[0] for _ in range(repeats))
