"""Reading and writing the workflow's tables.

Every output is written to a temporary file beside its target and renamed into place, so a job that
fails or is killed never leaves a half-written file that a later run would mistake for a result.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s directory; rename it onto ``path`` only on success.

    A full file system (whatever library wrote the file, and however it words it) is raised as
    ``OSError(ENOSPC)`` naming ``path``, not the temporary file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise _no_space(err, path) or OSError(err.errno, f"cannot write {path}: {err.strerror or err}") from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates 0600 files; give results the permissions a plain open() would.
        if tmp_path.exists():
            os.chmod(tmp_path, 0o666 & ~_UMASK)
        os.replace(tmp_path, path)
    except Exception as err:
        full = _no_space(err, path)
        if full is None:
            raise
        raise full from err
    finally:
        tmp_path.unlink(missing_ok=True)


_NO_SPACE = ("No space left on device", "os error 28", "Disk quota exceeded", "os error 122")


def _no_space(err: BaseException, path: Path) -> OSError | None:
    """An OSError naming ``path`` if ``err`` says its file system is full (polars, pyarrow and open()
    each say it their own way), else None."""
    if getattr(err, "errno", None) not in (errno.ENOSPC, errno.EDQUOT) and not any(s in str(err) for s in _NO_SPACE):
        return None
    try:
        free = f"{shutil.disk_usage(path.parent).free / 2**20:.1f} MiB free"
    except OSError:
        free = "free space unknown"
    return OSError(
        errno.ENOSPC, f"No space left on device: cannot write {path} ({free} on its file system); nothing was written"
    )


def write_parquet(df: pl.DataFrame, path: str | os.PathLike) -> None:
    """Write ``df`` to ``path`` atomically (zstd-compressed Parquet)."""
    with atomic_path(path) as tmp:
        df.write_parquet(tmp, compression="zstd")


def write_text(text: str, path: str | os.PathLike) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def conform(df: pl.DataFrame, schema: dict, name: str) -> pl.DataFrame:
    """Select and cast ``df`` to ``schema``; raise a ValueError naming ``name`` and the missing columns."""
    import polars as pl

    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise ValueError(f"{name}: missing column(s) {missing}; found {df.columns}")
    return df.select([pl.col(c).cast(t) for c, t in schema.items()])


def read_table(path: str | os.PathLike, schema: dict | None = None) -> pl.DataFrame:
    """Read a Parquet table, optionally checking it against ``schema``."""
    import polars as pl  # imported here: atomic writes work without polars

    df = pl.read_parquet(path)
    return conform(df, schema, str(path)) if schema else df


def unique_in_order(items: Sequence[str]) -> list[str]:
    """Deduplicate ``items`` keeping the first occurrence's position."""
    return list(dict.fromkeys(items))
