"""The searches generation runs, in one table: which one a GenerationConfig asks for, and how it runs.

    strategy = strategy_for(cfg)                 # the first entry of STRATEGIES that applies
    out = strategy.run(stepper, state, job)      # what `generate` does after `start`

Each entry says when it applies, runs its search over a Steppable, and says whether a driver may
advance it one step at a time from logits it computes itself (`stepwise`: greedy and sampling,
`SampleSearch`): a server's scheduler runs those between its batched steps; the others (beam searches)
run in the caller's thread against a stand-in model whose steps the scheduler batches. `generate` and
the server read this one table, so a search added here is served as `generate` runs it.
"""

from collections.abc import Callable
from dataclasses import dataclass

from encdec.generation import fallback
from encdec.generation.beam_search import beam_search
from encdec.generation.config import GenerationConfig
from encdec.generation.generate_output import GenerateOutput
from encdec.generation.group_beam_search import group_beam_search
from encdec.generation.mbr import mbr_search
from encdec.generation.search import SampleSearch, sample_search
from encdec.generation.speculative_rounds import speculative_search


@dataclass(frozen=True)
class Strategy:
    name: str
    applies: Callable[[GenerationConfig], bool]
    run: Callable[..., GenerateOutput]  # (stepper, state, job: generate's Prepared) -> the output
    stepwise: bool  # its search is a SampleSearch a driver may advance from logits of its own
    drafted: bool = False  # runs with a draft model (generate's assistant_model), and only then; starts its own states

    def search(self, job) -> SampleSearch:
        """The stepwise search of `job` (generate's Prepared), for a driver to advance: its rows' prompts."""
        return SampleSearch(job.prompt.repeat_interleave(job.rows, 0), job.cfg, job.device, job.stop)


def run_group_beams(stepper, state, job) -> GenerateOutput:
    return group_beam_search(stepper, state, job.prompt, job.cfg, job.device)


def run_beams(stepper, state, job) -> GenerateOutput:
    return beam_search(stepper, state, job.prompt, job.cfg, job.device, job.stop)


def run_samples(stepper, state, job) -> GenerateOutput:
    return sample_search(stepper, state, job.prompt.repeat_interleave(job.rows, 0), job.cfg, job.device, job.stop)


def run_temperatures(stepper, state, job) -> GenerateOutput:
    return fallback.run_fallback(stepper, state, job, strategy_for)


def run_speculative(stepper, state, job) -> GenerateOutput:
    return speculative_search(stepper, job)  # the target's and the draft's states: started there


STRATEGIES = (
    Strategy("speculative", lambda cfg: True, run_speculative, stepwise=False, drafted=True),  # its refusals: there
    Strategy("temperature fallback", fallback.applies, run_temperatures, stepwise=False),  # its passes: below
    Strategy("diverse beam search", lambda cfg: cfg.num_beam_groups > 1, run_group_beams, stepwise=False),
    Strategy("beam search", lambda cfg: cfg.num_beams > 1, run_beams, stepwise=False),
    Strategy("minimum Bayes risk", lambda cfg: cfg.mbr is not None, mbr_search, stepwise=False),  # generation.mbr
    Strategy("sampling", lambda cfg: cfg.do_sample, run_samples, stepwise=True),
    Strategy("greedy", lambda cfg: True, run_samples, stepwise=True),
)


def strategy_for(cfg: GenerationConfig, drafted: bool = False) -> Strategy:
    """The search `cfg` asks for: the first entry of STRATEGIES that applies (greedy applies to any), among those
    that run with a draft model where `drafted`, else among the others."""
    return next(strategy for strategy in STRATEGIES if strategy.drafted == drafted and strategy.applies(cfg))
