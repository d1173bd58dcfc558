"""Several training processes, started by torchrun or by `encdec train --nproc-per-node N`, failing as one.

    before any process group starts   the refusals every process would make alike (`check_before_start`), and
                                      before the launcher starts any, what they would refuse once they met: the
                                      run directory, a missing data file (`check_before_launch`)
    a process that fails              writes its sentence into torch elastic's error file (TORCHELASTIC_ERROR_FILE);
                                      under torchrun only rank 0 prints it, the others exit quietly with its code
    --nproc-per-node N                `launch_workers` starts the N processes itself (torch elastic's agent, as
                                      torchrun does) and turns a failure into one sentence and the process's exit
                                      code, where torchrun adds its ChildFailedError traceback

A process knows the launcher speaks for it by LAUNCHED_BY (set in the environment the launcher passes on).
"""

import json
import logging
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from encdec.data.reading import require_regular_file
from encdec.errors import ConfigError, EncdecError
from encdec.runs.run_dir import RunDir
from encdec.sizing import available_cores
from encdec.training import distributed
from encdec.training.loader import refuse_packing_across_processes
from encdec.training.run_config import RunConfig
from encdec.training.run_lock import check_run_dir

LAUNCHED_BY = "ENCDEC_LAUNCHER"  # set to the process count in the environment of the processes it starts
ERROR_FILE = "TORCHELASTIC_ERROR_FILE"  # where torch elastic's agent reads a failed process's cause
AGENT_RUN_ID = "TORCHELASTIC_RUN_ID"  # set by torch elastic's agent (torchrun's, or the launcher's) in its processes


class WorkerError(EncdecError):
    """A process the launcher started failed: its sentence, and the exit code the launcher ends with."""

    def __init__(self, sentence: str, exit_code: int):
        super().__init__(sentence)
        self.exit_code = exit_code


def check_before_start(cfg: RunConfig, layout: distributed.Layout) -> None:
    """What every process of `layout` would refuse alike, refused before any process group starts: the devices
    (one GPU each) and the batches (`check_processes`)."""
    if layout.world_size > 1:
        distributed.check_devices(layout, distributed.resolve_device(cfg.training.device))
        check_processes(cfg, layout.world_size)


def check_before_launch(cfg: RunConfig, out: str | Path, resume: bool) -> None:
    """What the processes `launch_workers` starts would refuse once they met, refused before any starts, reading
    only: the run directory rank 0 refuses (`check_run_dir`) and a data file that is missing or not a regular
    file, where no hub dataset stands in for it. A refusal so comes at once, alone, with no launch to stop."""
    check_run_dir(RunDir(out), resume)
    for data in (cfg.data, *(member.data for member in cfg.data.mixture)):
        if data.format != "datasets" and not data.hub_name:
            for path in (*data.train, *data.validation):
                require_regular_file(path)


def check_processes(cfg: RunConfig, world_size: int) -> None:
    """The global batch splits into equal rows for `world_size` processes, and is not packed (a packed batch has
    no fixed rows to split): refused before a training sets up, let alone reports a resume's config changes."""
    if world_size > 1:
        distributed.rows_for_rank(cfg.training.batch_size, distributed.DistInfo(world_size=world_size))
        if cfg.objective.pack:
            refuse_packing_across_processes()


def local_layout(nproc: int, device: str) -> distributed.Layout:
    """The layout `--nproc-per-node nproc` starts on this machine, refused where the machine cannot hold it
    (more CPU processes than cores only fight over them) or where torchrun already started this process."""
    if "WORLD_SIZE" in os.environ:
        raise ConfigError("--nproc-per-node starts the processes itself; run it without torchrun (WORLD_SIZE is set)")
    cores = available_cores()
    if distributed.resolve_device(device) == "cpu" and nproc > cores:
        raise ConfigError(f"--nproc-per-node {nproc} asks for more CPU processes than this machine's {cores} cores")
    return distributed.Layout(world_size=nproc, local_world_size=nproc)


def launch_workers(argv: list[str], nproc: int, verbose: bool = False) -> int:
    """Run `encdec ARGV` in `nproc` processes on this machine under torch elastic's agent (as torchrun does) and
    return their exit code; a failed process's sentence (from its error file) is raised as one WorkerError."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    silenced = logging.root.manager.disable
    if not verbose:  # the agent's notes on starting and stopping processes, each logger set to WARNING
        logging.disable(logging.CRITICAL)
    environ = {LAUNCHED_BY: str(nproc), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    if not verbose:  # the processes' C++ warnings (c10d's socket notes), which pass by Python's stderr, unsaid
        environ["TORCH_CPP_LOG_LEVEL"] = os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR")
    saved = {name: os.environ.get(name) for name in environ}
    os.environ.update(environ)
    try:
        with tempfile.TemporaryDirectory(prefix="encdec-launch-") as logs:
            config = LaunchConfig(
                min_nodes=1,
                max_nodes=1,
                nproc_per_node=nproc,
                run_id=str(uuid.uuid4()),
                rdzv_backend="c10d",
                rdzv_endpoint="localhost:0",  # a free port: launches side by side do not collide
                max_restarts=0,
                logs_specs=DefaultLogsSpecs(log_dir=logs),
            )
            try:
                elastic_launch(config, sys.executable)("-m", "encdec", *argv)
            except ChildFailedError as error:
                return _report(error.failures)
            except SignalException as error:  # Ctrl-C or a kill: the agent stopped the processes (they saved)
                if error.sigval == signal.SIGINT:
                    raise KeyboardInterrupt from None
                return 128 + int(error.sigval)
    finally:
        logging.disable(silenced)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return 0


def _report(failures: Mapping) -> int:
    """The exit code of processes stopped by a signal after saving (rank 0 printed how to resume); else a
    WorkerError: the first sentence a failed process wrote, or what ended the first one that wrote none."""
    said = [f for f in failures.values() if isinstance(f.message, dict) and f.message.get("encdec")]
    if said:
        first = min(said, key=lambda f: f.timestamp)
        raise WorkerError(str(first.message.get("message")), int(first.message.get("code", 2)))
    codes = {f.exitcode for f in failures.values()}
    if codes <= {130, 143}:
        return max(codes)
    causes = [item for item in failures.items() if item[1].exitcode != -signal.SIGTERM] or list(failures.items())
    rank, first = min(causes, key=lambda item: item[1].timestamp)
    if first.exitcode < 0:
        oom = " (the system's out-of-memory killer sends it)" if first.exitcode == -signal.SIGKILL else ""
        raise WorkerError(f"training process {rank} was killed by {first.signal_name()}{oom}", 128 - first.exitcode)
    raise WorkerError(
        f"training process {rank} failed with exit code {first.exitcode}; its output above says why", first.exitcode
    )


def speaks_for_all(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process's warnings stand for every process's: under torchrun (its agent's RUN_ID in the
    environment) only rank 0's do, as the processes fail and warn alike; a process started any other way speaks
    for itself."""
    env = os.environ if environ is None else environ
    if AGENT_RUN_ID not in env:
        return True
    try:
        return int(env.get("RANK", "0")) == 0
    except ValueError:
        return True


def prints_failure(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process prints its failure: not under encdec's launcher, which prints the first failure (read
    from the error files) itself; under torchrun, the first of its processes to fail (`first_to_fail`);
    otherwise always. torchrun's report shows every process's."""
    env = os.environ if environ is None else environ
    if env.get(LAUNCHED_BY):
        return False
    return first_to_fail(env) if AGENT_RUN_ID in env else True


FIRST_MARK = "encdec-failure-printed"  # beside torchrun's processes' error files: one of them has printed
_first: set[str] = set()  # the error files of this process whose failure claimed the mark


def first_to_fail(env: Mapping[str, str]) -> bool:
    """Under torchrun the processes fail alike, and its agent stops the others once one has failed, so rank 0
    may be stopped before it prints: the first process to fail prints and the others stay silent. The first is
    the one that creates FIRST_MARK in its attempt's directory (torch elastic's temporary one, which holds each
    local process's error file), and it keeps printing; without an error file, rank 0 prints."""
    path = env.get(ERROR_FILE)
    if not path:
        return speaks_for_all(env)
    if path in _first:
        return True
    try:
        os.close(os.open(Path(path).parent.parent / FIRST_MARK, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    except OSError:
        return speaks_for_all(env)
    _first.add(path)
    return True


def record_failure(sentence: str, code: int, environ: Mapping[str, str] | None = None) -> None:
    """Write `sentence` where torch elastic's agent reads a failed process's cause (its error file), if it
    gave one: torchrun shows it as the root cause, encdec's launcher prints it."""
    env = os.environ if environ is None else environ
    path = env.get(ERROR_FILE)
    if not path:
        return
    info = {"py_callstack": sentence, "timestamp": str(int(time.time()))}  # torchrun's report shows py_callstack
    try:
        with open(path, "w") as file:
            json.dump({"message": {"message": sentence, "encdec": True, "code": code, "extraInfo": info}}, file)
    except OSError:
        pass  # the agent then reports the exit code alone
