"""`generate(..., compile=True)`: decoding steps of fixed shape, compiled on CPU, CUDA-graphed on GPUs.

`FixedShapeStepper` wraps a model whose `start` makes a `DecodeState` and whose `step_logits` runs a step
without moving the state on (the encoder-decoder family) as a `Steppable`, so the searches run
unchanged: `start` runs the model's eager `start` (the encoder, the cross-attention keys and values)
and loads the result into a static-mode DecodeState (encdec.modules.decode_state): buffers of fixed
shape, kept on the model per shape key (rows, examples, length bucket, source bucket, dtype, device),
so later calls of the same shape reuse them and what was compiled or captured for them. Each step
is the model's own step over those buffers,
  - on CPU: through `torch.compile` (inductor, static shapes);
  - on CUDA: captured once in a `torch.cuda.CUDAGraph` and replayed (its buffers never move, so
    nothing is copied in but the step's tokens);
the state's position moved on after it, outside what was compiled or captured. Where compiling or
capturing fails, the step runs eagerly on the same buffers, and the log says so once per reason
(mixture-of-experts decoders, which size their experts on the host, are not captured). Each shape key
compiles once; torch.compile keeps at most `torch._dynamo.config.recompile_limit` (8) of them per
process and runs further shapes eagerly.

Shapes: R rows, B examples, N rows per example, S source length, t new positions, V vocabulary.
"""

import logging
from collections import OrderedDict

import torch

from encdec.generation.interface import Capabilities
from encdec.modules import DecodeState
from encdec.modules.moe import MoE

log = logging.getLogger(__name__)

KEPT_SHAPES = 4  # fixed-shape states kept per model, the least recently used dropped first
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
    """`model` with fixed-shape steps where it can make them (`model.step_logits` over a DecodeState with
    a memory: the encoder-decoder family, T5, ROT5 and Transformer presets); any other Steppable as it is,
    which the log says once."""
    if callable(getattr(model, "step_logits", None)):
        return FixedShapeStepper(model)
    warn_once("compile=True serves the encoder-decoder family only: %s decodes eagerly", type(model).__name__)
    return model


class FixedStep:
    """A static-mode DecodeState, the step's input tokens (R, 1) in a buffer of their own, and the runner
    that steps them (eager, compiled or replayed)."""

    def __init__(self, model, state: DecodeState):
        self.model, self.state = model, state
        self.tokens = torch.zeros(state.rows, 1, dtype=torch.long, device=state.device)
        self.runner = make_runner(self)

    def run(self) -> torch.Tensor:
        """The step of `tokens` at the state's position -> logits (R, V); the state is not moved on."""
        return self.model.step_logits(self.tokens, self.state)[:, -1]

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (R, 1) -> logits (R, V): copies the tokens in, steps them, moves the state on."""
        self.tokens.copy_(tokens)
        logits = self.runner()
        self.state.advance(1)
        return logits


class FixedState:
    """The decode state of fixed-shape steps: a FixedStep, whose static state beam search reorders."""

    def __init__(self, step: FixedStep):
        self.step = step

    def reorder(self, index: torch.Tensor) -> None:
        self.step.state.reorder(index)


class FixedShapeStepper:
    """A Steppable whose steps have fixed shapes, compiled (CPU) or captured (CUDA)."""

    capabilities = Capabilities(steps_last_only=True)

    def __init__(self, model):
        self.model = model
        self.config = model.config
        self.device = next(model.parameters()).device

    def start(self, src_ids: torch.Tensor, src_mask: torch.Tensor | None, max_new_tokens: int, beams: int = 1):
        eager = self.model.start(src_ids, src_mask, max_new_tokens, beams)
        examples = eager.rows // eager.groups
        key = (eager.rows, examples, bucket(max_new_tokens + 1), bucket(eager.memory_width), eager.dtype, eager.device)
        step = fixed_step_for(self.model, key, eager)
        step.state.load(eager)
        return FixedState(step)

    def step(self, tgt_ids: torch.Tensor, state: FixedState, last_only: bool = False) -> torch.Tensor:
        """tgt_ids (R, t) -> logits (R, 1, V) of the last position (each position runs as one step)."""
        step = state.step
        for t in range(tgt_ids.shape[1]):
            logits = step(tgt_ids[:, t : t + 1])
        return logits[:, None]


def fixed_step_for(model, key: tuple, like: DecodeState) -> FixedStep:
    """The fixed-shape state (and compiled step) of `key` on `model`, made on first use."""
    kept = model.__dict__.setdefault("_fixed_steps", OrderedDict())
    if key in kept:
        kept.move_to_end(key)
        return kept[key]
    length, source = key[2:4]
    state = DecodeState.fixed(like, length, source)
    step = FixedStep(model, state)
    kept[key] = step
    while len(kept) > KEPT_SHAPES:
        kept.popitem(last=False)
    return step


def make_runner(step: FixedStep):
    """What runs `step.run`: compiled on CPU, captured in a CUDA graph on CUDA, eager where neither can."""
    if step.state.device.type != "cuda":
        return CompiledRunner(step)
    if any(isinstance(module, MoE) for module in step.model.modules()):
        warn_once(
            "mixture-of-experts steps size their experts on the host, which a CUDA graph cannot: they run eagerly"
        )
        return EagerRunner(step)
    return GraphRunner(step)


class EagerRunner:
    """The fixed-shape step run eagerly: the fallback. Subclasses change only `__call__`."""

    def __init__(self, step: FixedStep):
        self.step = step

    def __call__(self) -> torch.Tensor:
        return self.step.run()


class CompiledRunner(EagerRunner):
    """The step through torch.compile with static shapes; eager from the first failure on."""

    def __init__(self, step: FixedStep):
        super().__init__(step)
        try:
            self.compiled = torch.compile(step.run, dynamic=False)
        except Exception as error:  # noqa: BLE001 - any failure means eager, said once
            warn_once("torch.compile is unavailable (%s): decoding steps run eagerly", type(error).__name__)
            self.compiled = None

    def __call__(self) -> torch.Tensor:
        if self.compiled is not None:
            try:
                return self.compiled()
            except Exception as error:  # noqa: BLE001 - rerun eagerly: the step rewrites the same positions
                warn_once("compiling the decoding step failed (%s): decoding steps run eagerly", type(error).__name__)
                self.compiled = None
        return super().__call__()


class GraphRunner(EagerRunner):
    """The eager step captured once in a CUDA graph and replayed; eager if capture fails."""

    def __init__(self, step: FixedStep):
        super().__init__(step)
        self.graph, self.logits = None, None
        try:
            self.graph, self.logits = capture(step)
        except Exception as error:  # noqa: BLE001 - any failure means eager, said once
            warn_once("capturing the decoding step in a CUDA graph failed (%s): it runs eagerly", type(error).__name__)

    def __call__(self) -> torch.Tensor:
        if self.graph is None:
            return super().__call__()
        self.graph.replay()
        return self.logits.clone()  # the next replay overwrites the graph's output


def capture(step: FixedStep) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Warm the step up on a side stream, then capture it: (graph, its logits (R, V) buffer).

    The warm-up writes the state's current position (0) of the self-attention buffers, which the first
    real step overwrites."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            step.run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = step.run()
    return graph, logits
