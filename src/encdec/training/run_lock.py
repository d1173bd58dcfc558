"""A run directory held by one training at a time, and written only through real files.

    RUN_DIR/.lock   an advisory lock (flock) that `encdec train` holds for the whole run,
                    with the holder's pid and host in it for the refusal message (the
                    layout is runs/run_dir.py's)

The operating system drops an flock when its process dies, so a run killed with
SIGKILL leaves no stale lock. Under torchrun only rank 0 takes the lock, and every
rank learns its answer, so a refused run ends on all ranks instead of hanging.
"""

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from encdec.errors import ConfigError, EncdecError
from encdec.runs.run_dir import RunDir
from encdec.safe_paths import check_not_symlink
from encdec.training import distributed


@contextmanager
def lock_run_dir(run: RunDir) -> Iterator[None]:
    """Create the run directory and hold its lock; ConfigError naming the holder if another process holds it."""
    run_dir = run.path
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run.lock
        check_not_symlink(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        raise ConfigError(f"cannot create the run directory {run_dir} ({error.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"{run_dir} is in use by encdec train ({_holder(fd)}); wait for it or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode() + b"\n", 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # the lock itself goes with the descriptor
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0))
        return f"pid {int(holder['pid'])} on {holder['host']}"
    except (OSError, ValueError, KeyError, TypeError):  # the holder has not written it yet
        return "another process"


@contextmanager
def hold_run_dir(run: RunDir, info: distributed.DistInfo) -> Iterator[None]:
    """Around a whole training: rank 0 locks the run directory and checks its files; every rank raises
    its refusal."""
    with ExitStack() as held:
        refusal = None
        if info.is_main:
            try:
                held.enter_context(lock_run_dir(run))
                run.check_files()
            except EncdecError as error:
                refusal = error
        refusal = distributed.gather_objects(refusal, info)[0]  # rank 0's answer, on every rank
        if refusal is not None:
            raise refusal
        yield
