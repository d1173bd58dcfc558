"""Paths inside a directory encdec owns (a run, a checkpoint, a shard set, a tokenizer), never outside it.

A name read from a file (a `latest` pointer, a shard manifest, a tokenizer
manifest) names an entry below its directory: not an absolute path, no `..`,
and no symlink on the way, so a planted or hand-edited file cannot make encdec
read or write anywhere else. Files encdec writes into a run directory must not
be symlinks either (`check_not_symlink`). This module sits at the bottom of the
package so that data/, tokenizers/ and training/ can all use it.
"""

from pathlib import Path, PurePosixPath

from encdec.errors import CheckpointError, EncdecError


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
