"""The linear products of inference on CPU: a decoding step's few rows, and an encoder's many.

Each decoding step multiplies the batch's (or its beams') newest position, 8-64 rows,
by the same feed-forward and vocabulary matrices. F.linear repacks the weight for
BLAS at every call. On CPU, oneDNN's linear with the weight reordered once into its
blocked layout is faster for weights of a megabyte or more, and torch ships it; the
reordered copy is made on first use and remade whenever the weight changes (its
version counter moves with every in-place update, and a sample of its values, checked once a forward or
generate call, sees a change made through `weight.data`, which the counter misses). Without oneDNN, the transposed
product weight @ x^T still beats F.linear on these shapes. Against F.linear everywhere,
this saved about 15% of a greedy and 9% of a beam-search generate call in
benchmarks/bench_generate.py (docs/benchmarks.md).

One row (a greedy step at batch 1) takes BLAS's product on the transposed copy whatever the weight's size: on
a Xeon with AMX (2 threads, November 2026) oneDNN's linear took 94 against 44 us for 1 x 512 by 512 x 2,048 and
2,510 against 2,178 us for Whisper's 51,865 x 512 head, while at 5 rows (beam 5) it took half BLAS's time
(2,713 against 4,761 us); a Whisper-base greedy transcription fell from 5.7 to 5.1 s (docs/benchmarks.md).

A step's few rows (16 or fewer) by a small weight (under a megabyte: the attention
projections at the benchmark shape) take BLAS's product on a transposed contiguous copy
of the weight, made and kept like the reordered one: oneDNN's linear costs about 13 us
per call before any arithmetic (8 x 16 by 16 x 16: 15 against 1.4 us), more than its
kernel gains on such weights (8 x 256 by 256 x 256 out of cache, one thread: 35 us
against 32; at 32 rows, 61 against 64, so beams keep oneDNN). A greedy generate call
at the benchmark shape took 578 against 599 ms with it on one thread and 424 against
439 on two (medians of 15, interleaved).

The encoder of a generate call (and any forward without gradients) multiplies many
rows, 128 and more, by every weight, small ones included: there oneDNN with the
reordered weight took half of F.linear's time on one thread of this 2-core EPYC
(2,048 x 256 by 256 x 1,024: 7.5 against 14.3 ms; by 256 x 256: 1.1 against 3.4 ms).
So with oneDNN every other CPU fp32 product without gradients takes it; the reordered
copies cost one more copy of the weights' memory while the weights live.

A bf16 model's products without gradients (where oneDNN multiplies bf16: AVX-512 BF16, AMX) take oneDNN's
kernel on the reordered weight at every row count: F.linear reorders a bf16 weight at every call. On a Xeon with
AMX (one thread, November 2026, beside other work: rough), one row by t5-small's 512 x 2,048 took 161 against 470 us, by its 32,128 x 512
vocabulary 3.6 against 8.5 ms; 8 rows by 512 x 512, 42 against 132 us (benchmarks/bench_generate.py
--dtype bf16 measures it whole, docs/benchmarks.md).

Training, GPUs, fp16 and CPU autocast (whose F.linear computes in bf16) keep F.linear.

Inside torch.compile (the fixed-shape steps of generate(compile=True)) the same products
run as the custom op `encdec::cpu_linear`, which inductor calls as it is: traced as
F.linear, inductor's CPU matmul took 76 against oneDNN's 40 us per product of a decoding
step at the benchmark shape.

Shapes: N rows (batch times positions), C_in, C_out.
"""

import weakref

import torch
import torch.nn.functional as F

FEW_ROWS = 64  # at or below this many rows a product counts as a decoding step's
BLAS_ROWS = 16  # at or below this many rows a small weight's product takes BLAS on its transposed copy
LARGE_WEIGHT = (
    1 << 18
)  # elements (1 MB in fp32); a step's product by a smaller weight takes BLAS on its transposed copy
ONEDNN = (
    torch.backends.mkldnn.is_available()
    and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    and hasattr(torch.ops.mkldnn, "_linear_pointwise")
)  # private; torch.compile's CPU backend calls them

ONEDNN_BF16 = ONEDNN and torch.ops.mkldnn._is_mkldnn_bf16_supported()  # oneDNN multiplies bf16 on this CPU
ACTIVATIONS = {  # what may follow the product, by name: inside oneDNN's kernel where it takes it
    "none": lambda out: out,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda out: F.gelu(out, approximate="tanh"),
}
ONEDNN_ACTIVATIONS = {
    "none": ("none", ""),
    "relu": ("relu", ""),
    "gelu": ("gelu", "none"),
    "gelu_tanh": ("gelu", "tanh"),
}

# (id, kind) -> [weight, version, copy, a sample of the weight's values, the pass it was last checked in, the
# sample's places]
_derived: dict[tuple[int, str], list] = {}
PROBES = 32  # values of a weight sampled to see a change its version counter misses
_pass = 0  # counts the models' forward and generate calls (new_pass)


def new_pass() -> None:
    """A model's forward or generate call begins: each derived copy is checked against its weight's values once
    more, at its first use in the call. An in-place change through `weight.data` (peft's merge writes
    `base_layer.weight.data += delta`) leaves the version counter where it was; the sampled values see it."""
    global _pass
    if not torch.compiler.is_compiling():  # a compiled graph keeps no copies of its own here, and no global store
        _pass += 1


def probe_places(weight: torch.Tensor) -> torch.Tensor:
    """The flat indices of PROBES values of `weight`, evenly spaced through it (integers: exact at any size)."""
    return torch.arange(PROBES, device=weight.device) * (weight.numel() - 1) // (PROBES - 1)


def sample(weight: torch.Tensor, places: torch.Tensor) -> torch.Tensor:
    """The values of `weight` at flat indices `places` (probe_places'): one operation, as a check once a pass
    of every weight a step reads (a server starts a pass at each join) should cost."""
    return torch.take(weight, places)


def decoding_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    """x (..., C_in) @ weight (C_out, C_in)^T + bias -> (..., C_out), F.linear's values up to rounding;
    `activation` (one of ACTIVATIONS: relu, gelu, gelu_tanh) applied to them, inside oneDNN's kernel where it takes
    the product (the encoder's separate ReLU over (B, S, d_ff) cost as much again as its fused one; Whisper base's
    GELU over 12,000 rows, 183 against 147 ms on a Xeon with AMX)."""
    rows = x.numel() // x.shape[-1]
    if torch.compiler.is_compiling():
        return compiled_linear(x, weight, bias, activation)
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    if x.device.type != "cpu" or needs_grad or torch.is_autocast_enabled("cpu") or x.dtype != weight.dtype:
        return plain_linear(x, weight, bias, activation)
    flat = x.reshape(rows, x.shape[-1])
    if x.dtype == torch.bfloat16 and ONEDNN_BF16 and (bias is None or bias.dtype == torch.bfloat16):
        out = onednn_linear(flat, reordered(weight), bias, activation)
        return out.reshape(*x.shape[:-1], weight.shape[0])
    if x.dtype != torch.float32:
        return plain_linear(x, weight, bias, activation)
    few, large = rows <= FEW_ROWS, weight.numel() >= LARGE_WEIGHT
    # BLAS on a transposed copy: at one row, or a few by a small weight, oneDNN's fixed cost outweighs its gain
    if rows == 1 or (rows <= BLAS_ROWS and not large):
        weight_t = transposed(weight)
        out = torch.mm(flat, weight_t) if bias is None else torch.addmm(bias, flat, weight_t)
        out = activated(out, activation)
    elif ONEDNN:
        out = onednn_linear(flat, reordered(weight), bias, activation)
    elif few:  # a large weight: the transposed product beats F.linear
        out = (weight @ flat.T).T if bias is None else torch.addmm(bias[:, None], weight, flat.T).T
        out = activated(out, activation)
    else:
        return plain_linear(x, weight, bias, activation)
    return out.reshape(*x.shape[:-1], weight.shape[0])


def compiled_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    """decoding_linear while torch.compile traces: for CPU fp32 inference the custom op `encdec::cpu_linear`,
    which makes the eager choice of kernel (BLAS or oneDNN) as one opaque call; else F.linear."""
    if (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and not torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
    ):
        return cpu_linear_op(x, weight, bias, activation)
    return plain_linear(x, weight, bias, activation)


def plain_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    """F.linear, then the activation asked for: where no faster kernel takes the product."""
    return activated(F.linear(x, weight, bias), activation)


def activated(out: torch.Tensor, activation: str) -> torch.Tensor:
    """`activation` (ACTIVATIONS' name) applied to a product computed without it."""
    return ACTIVATIONS[activation](out)


@torch.library.custom_op("encdec::cpu_linear", mutates_args=())
def cpu_linear_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    """x (..., C_in) by weight (C_out, C_in) -> (..., C_out), run eagerly by decoding_linear (BLAS on the transposed
    copy or oneDNN on the reordered one, as outside torch.compile)."""
    return decoding_linear(x, weight, bias, activation)


@cpu_linear_op.register_fake
def _(x, weight, bias, activation):
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def onednn_linear(
    flat: torch.Tensor, reordered_weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    """flat (N, C_in) times a weight in oneDNN's layout (from `reordered`) -> (N, C_out), then
    `activation` (ACTIVATIONS' name) fused into the same kernel."""
    attribute, algorithm = ONEDNN_ACTIVATIONS[activation]
    return torch.ops.mkldnn._linear_pointwise(flat, reordered_weight, bias, attribute, [], algorithm)


def reordered(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's layout of `weight`, made once per version of the weight and dropped with it."""
    return derived(weight, "onednn", torch.ops.mkldnn._reorder_linear_weight)


def transposed(weight: torch.Tensor) -> torch.Tensor:
    """weight (C_out, C_in) as a contiguous (C_in, C_out), made once per version of the weight and dropped with it."""
    return derived(weight, "transposed", lambda w: w.t().contiguous())


def derived(weight: torch.Tensor, kind: str, make) -> torch.Tensor:
    """make(weight), kept until the weight changes (its version counter moves, or, once a pass (new_pass), its
    sampled values) or is freed. A weight made under torch.inference_mode has no version counter: its values
    alone are checked."""
    key = (id(weight), kind)
    version = None if weight.is_inference() else weight._version
    entry = _derived.get(key)
    if entry is not None and entry[0]() is weight and entry[1] == version and entry[4] != _pass:
        with torch.inference_mode(False), torch.no_grad():
            entry[4] = _pass if torch.equal(sample(weight, entry[5]), entry[3]) else None
        if entry[4] is None:  # changed through .data: made again below
            entry = None
    if entry is None or entry[0]() is not weight or entry[1] != version:
        with torch.inference_mode(False), torch.no_grad():
            places = probe_places(weight)
            copy, probes = make(weight.detach()), sample(weight, places)
        entry = [weakref.ref(weight, lambda _, key=key: _derived.pop(key, None)), version, copy, probes, _pass, places]
        _derived[key] = entry
    return entry[2]
