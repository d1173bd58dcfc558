"""`generate(..., compile=True)`: decoding steps of fixed shape, compiled on CPU, CUDA-graphed on GPUs.

`FixedShapeStepper` wraps a model that can make fixed-shape steps (a `fixed_steps` method:
the encoder-decoder family's, `encdec.models.fixed_step.FixedSteps`) as a `Steppable`, so
the searches run unchanged: `start` runs the model's eager `start` (the encoder, the
cross-attention keys and values) and loads the result into those fixed buffers, kept on
the model per shape key (rows,
examples, length bucket, source bucket, dtype, device) so later calls of the same
shape reuse them and what was compiled or captured for them. Each step then runs
  - on CPU: the step through `torch.compile` (inductor, static shapes);
  - on CUDA: the eager step captured once in a `torch.cuda.CUDAGraph` and replayed
    (its buffers never move, so nothing is copied in but the step's tokens).
Where compiling or capturing fails, the step runs eagerly on the same buffers, and
the log says so once per reason (mixture-of-experts decoders, which size their experts
on the host, are not captured). Each shape key compiles once; torch.compile keeps at
most `torch._dynamo.config.recompile_limit` (8) of them per process and runs further
shapes eagerly.

Shapes: R rows, B examples, N rows per example, S source length, t new positions, V vocabulary.
"""

import logging
from collections import OrderedDict

import torch

from encdec.modules.moe import MoE

log = logging.getLogger(__name__)

KEPT_SHAPES = 4  # fixed-shape buffer sets kept per model, the least recently used dropped first
BUCKET = 64  # lengths and source lengths are rounded up to a multiple of this, so calls share shapes
_warned: set[str] = set()


def warn_once(message: str, *args) -> None:
    """Log a warning the first time this message (with its arguments) comes up."""
    key = message % args
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def bucket(n: int, size: int = BUCKET) -> int:
    """n rounded up to a multiple of `size`."""
    return -(-n // size) * size


def fixed_shape_stepper(model):
    """`model` with fixed-shape steps where it can make them (`model.fixed_steps`: the encoder-decoder
    family, T5, ROT5 and Transformer presets); any other Steppable as it is, which the log says once."""
    if callable(getattr(model, "fixed_steps", None)):
        return FixedShapeStepper(model)
    warn_once("compile=True serves the encoder-decoder family only: %s decodes eagerly", type(model).__name__)
    return model


class FixedState:
    """The decode state of fixed-shape steps: the buffers of one shape key."""

    def __init__(self, steps):
        self.steps = steps

    def reorder(self, index: torch.Tensor) -> None:
        self.steps.reorder(index)


class FixedShapeStepper:
    """A Steppable whose steps have fixed shapes, compiled (CPU) or captured (CUDA)."""

    steps_last_only = True

    def __init__(self, model):
        self.model = model
        self.config = model.config
        self.device = next(model.parameters()).device

    def start(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None, max_new_tokens: int, beams: int = 1):
        state = self.model.start(src_ids, src_mask, max_new_tokens, beams)
        hidden = state.memory.hidden  # (B, S, C)
        B, S = hidden.shape[:2]
        key = (B * beams, B, bucket(max_new_tokens + 1), bucket(S), hidden.dtype, hidden.device)
        steps = fixed_steps_for(self.model, key, hidden)
        steps.load(state)
        return FixedState(steps)

    def step(self, tgt_ids: torch.Tensor, state: FixedState, last_only: bool = False) -> torch.Tensor:
        """tgt_ids (R, t) -> logits (R, 1, V) of the last position (each position runs as one step)."""
        steps = state.steps
        for t in range(tgt_ids.shape[1]):
            logits = steps.runner(tgt_ids[:, t : t + 1])
        return logits[:, None]


def fixed_steps_for(model, key: tuple, like: torch.Tensor):
    """The buffers (and compiled step) of `key` on `model`, made on first use."""
    kept = model.__dict__.setdefault("_fixed_steps", OrderedDict())
    if key in kept:
        kept.move_to_end(key)
        return kept[key]
    rows, examples, length, source = key[:4]
    steps = model.fixed_steps(rows, examples, length, source, like)
    steps.runner = make_runner(steps)
    kept[key] = steps
    while len(kept) > KEPT_SHAPES:
        kept.popitem(last=False)
    return steps


def make_runner(steps):
    """tokens (R, 1) -> logits (R, V): copies the tokens in, runs the step at `steps.pos`, advances it."""
    if steps.pos.device.type != "cuda":
        return CompiledRunner(steps)
    if any(isinstance(module, MoE) for module in steps.model.decoder.modules()):
        warn_once(
            "mixture-of-experts steps size their experts on the host, which a CUDA graph cannot: they run eagerly"
        )
        return EagerRunner(steps)
    return GraphRunner(steps)


class EagerRunner:
    """The fixed-shape step run eagerly: the fallback. Subclasses change only `run`."""

    def __init__(self, steps):
        self.steps = steps

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        steps = self.steps
        steps.tokens.copy_(tokens)
        logits = self.run()
        steps.advance()
        return logits

    def run(self) -> torch.Tensor:
        """The step at `steps.pos` on `steps.tokens` -> logits (R, V)."""
        return self.steps.run(self.steps.tokens, self.steps.pos)


class CompiledRunner(EagerRunner):
    """The step through torch.compile with static shapes; eager from the first failure on."""

    def __init__(self, steps):
        super().__init__(steps)
        try:
            self.compiled = torch.compile(steps.run, dynamic=False)
        except Exception as error:  # noqa: BLE001 - any failure means eager, said once
            warn_once("torch.compile is unavailable (%s): decoding steps run eagerly", type(error).__name__)
            self.compiled = None

    def run(self) -> torch.Tensor:
        if self.compiled is not None:
            try:
                return self.compiled(self.steps.tokens, self.steps.pos)
            except Exception as error:  # noqa: BLE001 - rerun eagerly: the step rewrites the same positions
                warn_once("compiling the decoding step failed (%s): decoding steps run eagerly", type(error).__name__)
                self.compiled = None
        return super().run()


class GraphRunner(EagerRunner):
    """The eager step captured once in a CUDA graph and replayed; eager if capture fails."""

    def __init__(self, steps):
        super().__init__(steps)
        self.graph, self.logits = None, None
        try:
            self.graph, self.logits = capture(steps)
        except Exception as error:  # noqa: BLE001 - any failure means eager, said once
            warn_once("capturing the decoding step in a CUDA graph failed (%s): it runs eagerly", type(error).__name__)

    def run(self) -> torch.Tensor:
        if self.graph is None:
            return super().run()
        self.graph.replay()
        return self.logits.clone()  # the next replay overwrites the graph's output


def capture(steps) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Warm the step up on a side stream, then capture it: (graph, its logits (R, V) buffer).

    The warm-up writes position `pos` (0) of the self-attention buffers, which the first real step
    overwrites."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            steps.run(steps.tokens, steps.pos)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = steps.run(steps.tokens, steps.pos)
    return graph, logits
