"""Paths inside a directory encdec owns (a run, a checkpoint, a shard set, a tokenizer), never outside it.

A name read from a file (a `latest` pointer, a shard manifest, a tokenizer
manifest) names an entry below its directory: not an absolute path, no `..`,
and no symlink on the way, so a planted or hand-edited file cannot make encdec
read or write anywhere else. Files encdec writes into a run directory must not
be symlinks either (`check_not_symlink`). This module sits at the bottom of the
package so that data/, tokenizers/ and training/ can all use it.

Every file encdec writes where a user could have put a link goes through
`write_atomic`, `atomic_path`, `open_replacing` or `staged_files`: the bytes go to
a new file under a fresh name (created with O_EXCL, so never an existing file or
link) that is then renamed over the destination. A hard or symbolic link at the
destination is replaced, never written through, and a kill leaves the old file
or the new one, never half of one. `refuse_unsafe_output` keeps an output
directory away from the root, the home directory, the current one's parents and
a project's checkout.

An output path is confined as a whole, not only at its last name (`output_path`,
`output_dir`, and the same check in `new_file_beside` and `staged_files`, which
every write above goes through): no component of it may be a symlink, neither
the file or directory written nor any directory on the way, existing or about to
be made, or the bytes would land wherever the link leads. The path is checked as
it is spelled, name by name, from the root for an absolute path and from the
current directory (which the system has already resolved) for a relative one. Two
kinds of link are the system's own, and they may stand among the components:

- an entry of the file-system root (macOS's /tmp and /var, /bin on a merged /usr,
  a cluster's /scratch): only an administrator makes one;
- the home directory and the directories above it, as $HOME spells them: where the
  login itself stands, not a place a command names.

Any other link is refused in one sentence, one the user made included: encdec
cannot tell it from one planted in a shared or cloned folder, and the sentence
says where the link leads, so that the user can give that real path and where the
bytes go is written on the command line. The check sees the file system as the command finds it; it is not a
guard against another process swapping a directory for a link while encdec writes.
"""

import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TextIO

from encdec.errors import CheckpointError, ConfigError, EncdecError


def inside(root: Path, name: object, what: str = "a name", error: type[EncdecError] = CheckpointError) -> Path:
    """`root / name` for a relative `name` that stays below `root` and passes through no symlink."""
    if not isinstance(name, str) or not name.strip() or "\0" in name:
        raise error(f"{what} in {root} must be a relative file name, not {name!r}")
    parts = PurePosixPath(name)
    if parts.is_absolute() or name.startswith("~"):
        raise error(f"{what} {name!r} in {root} is an absolute path; encdec reads only names inside that directory")
    if ".." in parts.parts:
        raise error(f"{what} {name!r} in {root} climbs out with '..'; encdec reads only names inside that directory")
    path = Path(root)
    for part in parts.parts:
        path = path / part
        if path.is_symlink():
            raise error(f"{path} is a symlink; encdec follows no symlink inside {root}")
    return path


def plain_name(name: object, what: str, where: Path, error: type[EncdecError] = CheckpointError) -> str:
    """`name` itself when it is one path component (no '/', not '.' or '..'), else one sentence."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise error(f"{what} {name!r} in {where} is not a plain name; it must not hold '/' or be '..'")
    return name


def check_not_symlink(*paths: Path, error: type[EncdecError] = CheckpointError) -> None:
    """Refuse to write through any of `paths` that is a symlink (it would change a file elsewhere)."""
    for path in paths:
        if Path(path).is_symlink():
            raise error(
                f"{path} is a symlink, which encdec does not follow in a directory it writes; "
                "replace it with a real file or directory"
            )


def symlink_on_the_way(path: str | Path) -> Path | None:
    """The first component of `path` as spelled (`path` itself included) that is a symlink other than the
    system's own (the module's docstring says which), or None where there is none."""
    path = Path(path)
    partial = Path(path.anchor)
    for part in path.parts[1 if path.anchor else 0 :]:
        partial = partial / part
        try:
            mode = os.lstat(partial).st_mode
        except (OSError, ValueError):  # absent, below a file (or a NUL in the name): nothing further down is a link
            return None
        if stat.S_ISLNK(mode) and not _systems_own(partial):
            return partial
    return None


def _systems_own(link: Path) -> bool:
    """Whether `link` is an entry of the file-system root, or the home directory or one above it."""
    spelled = Path(os.path.abspath(link))
    home = Path(os.path.abspath(os.path.expanduser("~")))
    return spelled.parent == Path(spelled.anchor) or spelled == home or spelled in home.parents


def _refuse_links(path: Path, checked: Path, subject: str, error: type[EncdecError]) -> None:
    """Raise `error` where `checked` (`path` or a directory above it) is or passes through a symlink."""
    link = symlink_on_the_way(checked)
    if link is None:
        return
    target = os.path.realpath(link)
    if link == path:
        raise error(
            f"{subject} is a symlink to {target}; encdec writes nothing through a symlink, "
            "so remove it or choose another name"
        )
    raise error(
        f"{subject} goes through the symlink {link.name} to {target}; encdec writes nothing through a "
        "symlink, so name the real directory"
    )


def output_path(path: str | Path, what: str = "the output", error: type[EncdecError] = ConfigError) -> Path:
    """`path` as given, refused in one sentence (`what` names it: "--out") where it is, or goes through, a
    symlink that is not the system's own; what a command that writes checks its output path with."""
    path = Path(path)
    _refuse_links(path, path, f"{what} {path}", error)
    return path


def output_dir(path: str | Path, what: str = "the output", error: type[EncdecError] = ConfigError) -> Path:
    """The directory `path`, made with its missing parents once `output_path` lets it: a directory is never
    made through a link, so a refused path leaves nothing behind where the link leads."""
    path = output_path(path, what, error)
    if os.path.lexists(path) and not path.is_dir():
        raise error(f"{what} {path} is not a directory; name a directory to write into")
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_file_beside(path: Path) -> tuple[Path, int]:
    """A new empty file beside `path` under a fresh hidden name, and a descriptor open for writing on it;
    refused where a directory on the way to `path` is a symlink (a link at `path` itself is replaced) or where
    `path` is a directory."""
    path = Path(path)
    _refuse_links(path, path.parent, f"writing {path}", ConfigError)
    if path.is_dir() and not path.is_symlink():  # the rename would fail naming the new file, not the cause
        raise ConfigError(f"{path} is a directory; encdec writes a file there, so name the file instead")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(16):
        tmp = path.with_name(f".{path.name[:200]}.{secrets.token_hex(4)}.tmp")
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:  # a name someone else took: draw another
            continue
    raise FileExistsError(f"no fresh temporary name beside {path}")


def _replace(tmp: Path, fd: int, path: Path) -> None:
    """Flush `fd` to the disk and rename `tmp` over `path` (a link there is replaced, not followed)."""
    os.fsync(fd)
    os.replace(tmp, path)


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write `data` (str as UTF-8) to `path` through a new file renamed over it; returns `path`."""
    path = Path(path)
    tmp, fd = new_file_beside(path)
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(data.encode() if isinstance(data, str) else data)
        _replace(tmp, fd, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
    return path


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A new empty file's path beside `path`, for a writer that takes a path (safetensors, torch.save,
    savefig): renamed over `path` when the block ends, deleted when it raises."""
    path = Path(path)
    tmp, fd = new_file_beside(path)
    os.close(fd)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            _replace(tmp, fd, path)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def open_replacing(path: str | Path, initial: str = "") -> TextIO:
    """A new file holding `initial`, renamed over `path` and left open to append lines (flushed at each
    newline): what is appended goes to encdec's own file even where `path` was a link to another."""
    path = Path(path)
    tmp, fd = new_file_beside(path)
    try:
        _write_all(fd, initial.encode())
        _replace(tmp, fd, path)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return os.fdopen(fd, "a", encoding="utf-8", buffering=1)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextmanager
def staged_files(directory: str | Path) -> Iterator[Path]:
    """A new hidden directory inside `directory` for a writer of several files (transformers'
    save_pretrained); each plain file it wrote is renamed into `directory` when the block ends."""
    directory = Path(directory)
    _refuse_links(directory, directory, f"writing into {directory}", ConfigError)
    stage = Path(tempfile.mkdtemp(prefix=".staged.", dir=directory))
    try:
        yield stage
        for path in sorted(stage.iterdir()):
            if path.is_file() and not path.is_symlink():
                os.replace(path, directory / path.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def refuse_unsafe_output(path: str | Path, what: str = "--out") -> None:
    """Refuse as an output directory the file-system root, the home directory, a parent of it or of the
    current directory, and a project's checkout (a directory holding .git or pyproject.toml): encdec
    would write, and a training prune, among files that are not its own."""
    resolved = Path(os.path.realpath(path))
    home, cwd = Path(os.path.realpath(Path.home())), Path(os.path.realpath(Path.cwd()))
    reason = None
    if resolved.parent == resolved:
        reason = "the file-system root"
    elif resolved == home:
        reason = "the home directory"
    elif any((resolved / name).exists() for name in (".git", "pyproject.toml")):
        reason = "a project's checkout (it holds .git or pyproject.toml)"
    elif resolved in home.parents or resolved in cwd.parents:
        reason = f"a parent of the {'current' if resolved in cwd.parents else 'home'} directory"
    if reason:
        raise ConfigError(f"{what} {path} is {reason}; choose a directory of its own")
