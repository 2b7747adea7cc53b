"""Model weights on disk: fetched from the Hugging Face Hub once, identified by content or commit.

Used by ``generation.models.materialize`` (LLMs) and ``retrieval.encoders.materialize_retriever``
(encoders). A hub model is downloaded once, at a pinned revision, into the materialize rule's
folder under ``resources/``; every other job loads that folder with the hub switched off
(:func:`go_offline`), so compute nodes need neither network nor a token, and dozens of GPU jobs do
not each fetch tens of GB. Its fingerprint is the resolved commit. A local folder is fingerprinted
by the sha256 of its weight, config and tokenizer files, hashed once and then cached by (path,
size, mtime).

Folders are built in hidden work folders beside their target and renamed into place. A work
folder carries an ``flock``ed owner file while its job runs, so the next materialization can tell
the leftovers of a killed job (removed) from a live one (left alone).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from llm_utility.io import atomic_path, write_text

log = logging.getLogger(__name__)

# What a model needs from a hub repository: configs, tokenizer, weights. The weight format is picked
# per repository (safetensors when it has them, else PyTorch .bin files), see hub_allow_patterns.
HUB_CONFIG_FILES = ("*.json", "*.jinja", "*.model", "*.tiktoken", "merges.txt", "vocab.txt")
# Duplicates of the weights in other formats (Llama's original/ checkpoint, ONNX exports).
HUB_SKIP = ("original/*", "onnx/*", "openvino/*", "*.onnx", "*.onnx_data", "*.h5", "*.msgpack", "*.ot")
# Files that change what a model computes; everything else in a folder (README, images) does not.
_CONTENT_FILE = re.compile(r"(.*\.(safetensors|bin|pt|pth|gguf|json|jinja|model|tiktoken)|merges\.txt|vocab\.txt)$")
MARKER = ".materialized.json"  # beside downloaded weights: what they are (survives Snakemake's output cleanup)
OWNER = ".owner.lock"
_NO_FLOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def pin_instructions(repo: str) -> str:
    """How to find the commit to pin ``repo`` at."""
    return (
        f"print its current commit with `hf models info {repo} --expand sha` "
        f"(or `git ls-remote https://huggingface.co/{repo} HEAD`) and set that 40-character hash"
    )


def require_revision(repo: str, revision: str | None, key: str) -> str:
    """``revision``, or a ValueError naming ``key`` and saying how to pin it."""
    if not revision:
        raise ValueError(
            f"{key} is required for the hub model {repo!r}: an unpinned name can change under you, "
            f"and with it every result and the generation store's keys. {pin_instructions(repo)} as {key}"
        )
    return revision


def go_offline() -> None:
    """Switch the hub off for this process and its children: jobs load materialized folders only.

    ``huggingface_hub`` reads ``HF_HUB_OFFLINE`` when it is imported, so call this before anything
    imports transformers, sentence-transformers or vLLM.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


# ---------------------------------------------------------------------------------------------------
# Content fingerprints


def sha256_file(path: str | os.PathLike, block: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in blocks (weights are GBs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(block):
            digest.update(chunk)
    return digest.hexdigest()


class Sha256Cache:
    """sha256 of files, remembered in a JSON file by (resolved path, size, mtime_ns).

    Hashing 65 GB of weights takes minutes; a file whose size and mtime have not changed is taken
    to be unchanged. ``path=None`` keeps the cache in memory only.
    """

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = Path(path) if path else None
        self._entries: dict[str, dict[str, Any]] = self._load()
        self._new: dict[str, dict[str, Any]] = {}
        self.hashed = 0  # files actually read by this instance

    def _load(self) -> dict[str, dict[str, Any]]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # missing or damaged: a cache, so it is rebuilt
        return data if isinstance(data, dict) else {}

    def sha256(self, file: str | os.PathLike) -> str:
        file = Path(file).resolve()
        st = file.stat()
        key = str(file)
        entry = self._new.get(key) or self._entries.get(key)
        if entry and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
            return entry["sha256"]
        digest = sha256_file(file)
        self.hashed += 1
        self._new[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
        return digest

    def save(self) -> None:
        """Merge this instance's new entries into the file (another job may have added its own)."""
        if self.path is None or not self._new:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        merged = {**self._load(), **self._new}
        with atomic_path(self.path) as tmp:
            Path(tmp).write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        self._entries, self._new = merged, {}


def content_files(root: str | os.PathLike) -> list[Path]:
    """The files of a model folder that change what it computes, sorted; hidden ones are skipped."""
    root = Path(root)
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and _CONTENT_FILE.match(p.name)
        and p.name != "manifest.json"
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def content_fingerprint(root: str | os.PathLike, cache: Sha256Cache | str | os.PathLike | None = None) -> str:
    """``local:<sha256>`` over the relative path and sha256 of every :func:`content_files` file."""
    root = Path(root)
    files = content_files(root)
    if not any(_is_weights(f) for f in files):
        raise FileNotFoundError(f"{root}: no weight files (*.safetensors, *.bin, *.pt, *.gguf) to fingerprint")
    hashes = cache if isinstance(cache, Sha256Cache) else Sha256Cache(cache)
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.relative_to(root).as_posix()}\0{hashes.sha256(f)}\n".encode())
    hashes.save()
    return f"local:{digest.hexdigest()}"


def _is_weights(path: Path) -> bool:
    return path.suffix in {".safetensors", ".bin", ".pt", ".pth", ".gguf"}


def has_chat_template(root: str | os.PathLike) -> bool:
    """Whether the tokenizer in ``root`` has a chat template (read from its files, as transformers does)."""
    root = Path(root)
    if (root / "chat_template.jinja").is_file() or (root / "chat_template.json").is_file():
        return True
    try:
        config = json.loads((root / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(config.get("chat_template"))


# ---------------------------------------------------------------------------------------------------
# Work folders that a killed job does not leave behind


def _claim(folder: Path) -> int | None:
    """Mark ``folder`` as this live job's: an flock held until the job ends (None without flock)."""
    fd = os.open(folder / OWNER, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(
            f"{folder} is being built by another running job ({_owner_text(folder)}); wait for it to finish"
        ) from None
    except OSError as err:
        if err.errno not in _NO_FLOCK:
            os.close(fd)
            raise
        # No flock on this file system: the host and pid written below are all a successor can check.
    os.ftruncate(fd, 0)
    os.write(fd, f"{socket.gethostname()} {os.getpid()}\n".encode())
    return fd


def _owner_text(folder: Path) -> str:
    try:
        return (folder / OWNER).read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# A work folder without an owner file (from a release before owner files, or a replace_dir cut
# short) cannot tell whether its job lives; old enough, it cannot be a running job's.
OWNERLESS_GRACE = 6 * 3600.0


def is_abandoned(folder: Path, grace: float = OWNERLESS_GRACE) -> bool:
    """Whether ``folder`` is a work folder whose job is gone.

    Its owner file's lock tells (the kernel drops it when the job dies, on any host when the file
    system supports flock); without flock, a job on this host is checked by pid, and one on another
    host is presumed alive. A folder without an owner file (a half-made rename, or an older release)
    counts as abandoned once ``grace`` seconds old (6 hours: a dequantization or download running
    under an older release has no owner file either).
    """
    owner = folder / OWNER
    if not owner.exists():
        try:
            return time.time() - folder.stat().st_mtime > grace
        except FileNotFoundError:
            return False
    try:
        fd = os.open(owner, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno not in _NO_FLOCK:
            raise
        host, _, pid = _owner_text(folder).partition(" ")
        return host == socket.gethostname() and pid.isdigit() and not _pid_alive(int(pid))
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


@contextlib.contextmanager
def one_builder(target: str | os.PathLike) -> Iterator[None]:
    """Hold ``target``'s build lock: a second job materializing the same folder (two workflows that
    share ``resources/models``, or a test worker beside the DAG) waits here, then finds the first
    one's result and reuses it instead of dequantizing or downloading it again. The lock file is
    removed on release (a waiter that locked the removed file tries again), so nothing is left
    beside the folder. Where the file system has no flock, builders do not wait for each other
    (each still builds in its own work folder, so neither sees a half-built folder)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    path = target.parent / f".{target.name}.build.lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("%s is being built by another job; waiting for it", target)
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as err:
            if err.errno not in _NO_FLOCK:
                os.close(fd)
                raise
            break  # no flock here: nothing to wait for
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break  # locked the file that is there now
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder removed this file on release: lock the one that is there now
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)


def work_folders(target: Path) -> list[Path]:
    """Hidden work folders of ``target`` (``.{name}.tmp-*`` being built, ``.{name}.old-*`` being removed)."""
    target = Path(target)
    if not target.parent.is_dir():
        return []
    found = [*target.parent.glob(f".{target.name}.tmp-*"), *target.parent.glob(f".{target.name}.old-*")]
    return sorted(p for p in found if p.is_dir())


def remove_stale_work_folders(target: Path, keep: Path | None = None) -> list[Path]:
    """Delete the work folders of ``target`` whose jobs were killed (``keep`` excepted); return them."""
    removed = []
    for folder in work_folders(target):
        if folder != keep and is_abandoned(folder):
            log.warning("removing %s, left by a killed job (%s)", folder, _owner_text(folder))
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


@contextlib.contextmanager
def work_folder(target: str | os.PathLike, name: str | None = None) -> Iterator[Path]:
    """A hidden folder beside ``target`` to build it in; rename it onto ``target`` with :func:`replace_dir`.

    First removes what killed jobs left beside ``target``. Without ``name`` the folder is new and
    is deleted on exit if still there. With ``name`` (e.g. a commit) it is ``.{target}.tmp-{name}``,
    reused if a killed job left it (a download resumes), and kept when the block raises, so that
    the next attempt resumes it; it is removed by a later start once it is stale and not reused.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fixed = target.parent / f".{target.name}.tmp-{name}" if name else None
    remove_stale_work_folders(target, keep=fixed)
    if fixed is not None:
        fixed.mkdir(exist_ok=True)
        folder = fixed
    else:
        folder = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    fd = None
    ok = False
    try:
        fd = _claim(folder)
        yield folder
        ok = True
    finally:
        if fd is not None:
            os.close(fd)  # closing drops the flock
        if ok or fixed is None:
            shutil.rmtree(folder, ignore_errors=True)  # nothing left if it was renamed into place


def replace_dir(tmp: Path, target: Path) -> None:
    """Move the finished ``tmp`` onto ``target``; an existing ``target`` is set aside, then deleted."""
    (tmp / OWNER).unlink(missing_ok=True)
    # mkdtemp (and transformers' weight writer) create owner-only modes; give the usual ones, so that
    # other users of a shared cluster directory can read the model.
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)
    for f in tmp.rglob("*"):
        f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old-"))
        os.replace(target, old / "d")
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_json(data: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write ``data`` as indented JSON, atomically."""
    write_text(json.dumps(dict(data), indent=2) + "\n", path)


# ---------------------------------------------------------------------------------------------------
# The hub


def hub_allow_patterns(files: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """Which files of a repository to fetch: configs, tokenizer, ``extra``, and one weight format."""
    if any(f.endswith(".safetensors") for f in files):
        weights = ["*.safetensors"]
    else:  # older repositories ship PyTorch pickles only
        weights = ["*.bin", "*.pt"]
    return [*HUB_CONFIG_FILES, *weights, *extra]


def resolve_hub(repo: str, revision: str) -> tuple[str, list[str]]:
    """The commit ``revision`` (a commit, tag or branch) of ``repo`` points to, and its file names."""
    import huggingface_hub

    try:
        info = huggingface_hub.HfApi().model_info(repo, revision=revision)
    except Exception as err:  # gated, missing, no network: say what to do, keep the original error
        raise RuntimeError(_hub_hint(repo, revision, err)) from err
    files = [s.rfilename for s in (info.siblings or [])]
    if not info.sha or not _COMMIT.match(info.sha):
        raise RuntimeError(f"{repo}@{revision}: the hub returned no commit ({info.sha!r})")
    return info.sha, files


def _hub_hint(repo: str, revision: str, err: Exception) -> str:
    return (
        f"cannot read {repo}@{revision} from the Hugging Face Hub ({type(err).__name__}: {err}). "
        "Check the name and the revision; for a gated model accept its license on huggingface.co and "
        "set HF_TOKEN (passed on to cluster jobs, rules/common.smk envvars); this job needs network "
        "(materialize rules run on the machine that runs Snakemake)."
    )


def read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _listing(root: Path) -> dict[str, int]:
    return {
        p.relative_to(root).as_posix(): p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def _complete(folder: Path, marker: Mapping[str, Any] | None, repo: str, commit: str) -> bool:
    if not marker or marker.get("repo") != repo or marker.get("commit") != commit:
        return False
    files = marker.get("files") or {}
    return bool(files) and all(
        (folder / name).is_file() and (folder / name).stat().st_size == size for name, size in files.items()
    )


def fetch_hub_model(
    repo: str, revision: str, target: str | os.PathLike, extra_patterns: Sequence[str] = ()
) -> dict[str, Any]:
    """Download ``repo`` at ``revision`` into ``target`` once; return ``{repo, revision, commit, files}``.

    ``revision`` is resolved to its commit first and the download asks for that commit, so what
    lands on disk is exactly what the marker records. When ``target`` already holds that commit
    completely (its ``.materialized.json`` lists every file and size), nothing is fetched. The
    download goes to ``.{target}.tmp-{commit}``, which a killed job leaves for the next one to
    resume, and is renamed onto ``target`` when complete.
    """
    import huggingface_hub

    target = Path(target).resolve()
    commit, files = resolve_hub(repo, revision)
    if _complete(target, read_marker(target), repo, commit):
        log.info("%s already holds %s@%s: nothing to download", target, repo, commit)
        remove_stale_work_folders(target)
        return read_marker(target)  # type: ignore[return-value]
    allow = hub_allow_patterns(files, extra_patterns)
    with work_folder(target, name=commit) as staging:
        started = time.perf_counter()
        log.info("downloading %s@%s (%s) into %s", repo, commit, ", ".join(allow), staging)
        try:
            huggingface_hub.snapshot_download(
                repo, revision=commit, local_dir=staging, allow_patterns=allow, ignore_patterns=list(HUB_SKIP)
            )
        except Exception as err:
            raise RuntimeError(_hub_hint(repo, commit, err)) from err
        listing = _listing(staging)
        if not any(_is_weights(Path(name)) for name in listing):
            raise RuntimeError(f"{repo}@{commit}: no weight files matched {allow}; files: {sorted(files)[:20]}")
        marker = {"repo": repo, "revision": revision, "commit": commit, "files": listing}
        write_json(marker, staging / MARKER)
        log.info(
            "downloaded %d files, %.1f GB, in %.0f s",
            len(listing),
            sum(listing.values()) / 1e9,
            time.perf_counter() - started,
        )
        replace_dir(staging, target)
    return marker
