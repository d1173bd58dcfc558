"""A run directory held by one training at a time, and written only through real files.

    RUN_DIR/.lock   an advisory lock (flock) that `encdec train` holds for the whole run,
                    with the holder's pid and host in it for the refusal message (the
                    layout is runs/run_dir.py's)

The operating system drops an flock when its process dies, so a run killed with
SIGKILL leaves no stale lock. Under torchrun only rank 0 takes the lock, and every
rank learns its answer, so a refused run ends on all ranks instead of hanging.
The lock file is encdec's own: one that is a hard link to a file elsewhere is
replaced by a new file before anything is written into it.
"""

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from encdec.errors import ConfigError, EncdecError
from encdec.runs.checkpoint import recover_latest
from encdec.runs.run_dir import RunDir
from encdec.safe_paths import check_not_symlink, new_file_beside, output_path, symlink_on_the_way
from encdec.training import distributed


@contextmanager
def lock_run_dir(run: RunDir) -> Iterator[None]:
    """Create the run directory and hold its lock; ConfigError naming the holder if another process holds it."""
    run_dir = run.path
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        check_not_symlink(run.lock)
        fd = _locked_file(run.lock)
    except OSError as error:
        raise ConfigError(f"cannot create the run directory {run_dir} ({error.strerror})") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode() + b"\n", 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # the lock itself goes with the descriptor
    finally:
        os.close(fd)


def _locked_file(path: Path) -> int:
    """A descriptor on the run's lock file, locked: the file that holds `path`'s name, and one of
    encdec's own (a hard link to a file elsewhere is replaced); ConfigError naming the holder if busy."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigError(
                    f"{path.parent} is in use by encdec train ({_holder(fd)}); wait for it or choose another --out"
                ) from None
            held, named = os.fstat(fd), os.stat(path, follow_symlinks=False)
            if (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
                return fd if held.st_nlink == 1 else _own_lock_file(path, fd)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # another training gave the name to a new lock file meanwhile: lock that one


def _own_lock_file(path: Path, held: int) -> int:
    """A new lock file, locked before it takes `path`'s name (whose file `held` locks until then, so no
    other training slips in between); returns its descriptor and closes `held`."""
    tmp, fd = new_file_beside(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(held)
    return fd


def _holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0))
        return f"pid {int(holder['pid'])} on {holder['host']}"
    except (OSError, ValueError, KeyError, TypeError):  # the holder has not written it yet
        return "another process"


@contextmanager
def hold_run_dir(run: RunDir, info: distributed.DistInfo, resume: bool = False) -> Iterator[None]:
    """Around a whole training: rank 0 refuses a directory that is not a run of encdec's (before writing
    anything), locks it, checks its files, marks it as a run and recovers a lost `latest` pointer; every
    rank raises its refusal. A run that fails before it logs a step leaves no directory it made behind."""
    made = info.is_main and not run.path.exists()
    fresh = made or (info.is_main and run.path.is_dir() and not any(run.path.iterdir()))
    try:
        with ExitStack() as held:
            refusal = None
            if info.is_main:
                try:
                    check_run_dir(run, resume)
                    held.enter_context(lock_run_dir(run))
                    run.check_files()
                    run.mark()
                    recover_latest(run, resume)
                except EncdecError as error:
                    refusal = error
            refusal = distributed.gather_objects(refusal, info)[0]  # rank 0's answer, on every rank
            if refusal is not None:
                raise refusal
            yield
    except BaseException:
        if fresh:
            remove_if_unused(run, made)
        raise


def check_run_dir(run: RunDir, resume: bool) -> None:
    """What rank 0 refuses of a run directory before writing into it, reading only: a path through a link, a file,
    a directory that is not a run of encdec's, checkpoints a run not resumed would train over. `hold_run_dir`
    checks it first; encdec's launcher before it starts any process."""
    output_path(run.path, "--out")
    run.check_out()
    refuse_checkpoints_unless_resumed(run, resume)


def refuse_checkpoints_unless_resumed(run: RunDir, resume: bool) -> None:
    """A new training into a run's checkpoints is refused (its step directories without a `latest` pointer are
    recover_latest's to name)."""
    if not resume and run.path.is_dir() and run.latest() is not None:
        raise ConfigError(f"{run.path} already holds checkpoints; pass --resume to continue it or choose another --out")


def remove_if_unused(run: RunDir, made: bool) -> None:
    """Delete what starting wrote into a run directory that was empty (the lock, the marker, config.yaml, an
    empty metrics.jsonl), and the directory where this process made it: a failed start leaves no empty run."""
    if not run.path.is_dir() or symlink_on_the_way(run.path) is not None:  # never delete through a link
        return
    started = {".lock", ".encdec-run", "config.yaml", "metrics.jsonl"}
    entries = list(run.path.iterdir())
    if any(e.name not in started or not e.is_file() or e.is_symlink() for e in entries):
        return
    if (run.path / "metrics.jsonl").is_file() and (run.path / "metrics.jsonl").stat().st_size:
        return
    for entry in entries:
        entry.unlink()
    if made:
        run.path.rmdir()
