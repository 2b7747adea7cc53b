"""Where a dataset's or corpus's files come from: a local path, or a URL fetched once with a checksum.

A file spec in config is either a path string or a mapping::

    file: resources/data/nq-dev-kilt.jsonl                     # a file you put there yourself
    file: {url: http://.../nq-dev-kilt.jsonl, sha256: 3f...}    # downloaded to <data_dir>/nq-dev-kilt.jsonl
    file: {url: https://.../collection.tar.gz, md5: 87..., member: collection.tsv}

``path`` overrides where a downloaded file lands; ``member`` names the file to read inside a tar/zip
archive. ``sha256`` (or ``md5``, for publishers that only give md5) is checked after every download;
without either, the download logs the sha256 it got so you can pin it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from ..logs import DataError
from .readers import DataFormatError

_log = logging.getLogger("llm_utility")

# Where each kind of file is published, for the message a missing file gets (not defaults: hints).
WHERE_TO_GET = {
    "kilt": "the KILT release, https://github.com/facebookresearch/KILT (README table: <task>-dev-kilt.jsonl)",
    "kilt-knowledge-source": "http://dl.fbaipublicfiles.com/KILT/kilt_knowledgesource.json (see the KILT README)",
    "triviaqa-questions": "TriviaQA's triviaqa-rc.tar.gz, member qa/wikipedia-dev.json (http://nlp.cs.washington.edu/triviaqa)",
    "2wiki": "the 2WikiMultihopQA release, https://github.com/Alab-NII/2wikimultihop "
    "(data_ids_april7.zip, member dev.json)",
    "msmarco-qa": "MS MARCO QnA v2.1, https://microsoft.github.io/msmarco/ (dev_v2.1.json.gz)",
    "msmarco-ranking": "MS MARCO passage ranking, https://microsoft.github.io/msmarco/ "
    "(collectionandqueries.tar.gz, members queries.dev.small.tsv and qrels.dev.small.tsv)",
    "msmarco": "MS MARCO passage ranking, https://microsoft.github.io/msmarco/ "
    "(collection.tar.gz, member collection.tsv)",
    "dpr": "DPR's Wikipedia split, https://github.com/facebookresearch/DPR (psgs_w100.tsv.gz)",
    "local": "your own data (docs/data.md, 'Bring your own data')",
}


# Which data files each source reads (config key -> kind of file, for the hints above).
CORPUS_FILES = {
    "local": {"path": "local"},
    "dpr": {"file": "dpr"},
    "msmarco": {"file": "msmarco"},
    "kilt": {"file": "kilt-knowledge-source"},
}
DATASET_FILES = {
    "local": {"queries": "local"},
    "kilt": {"file": "kilt", "questions": "triviaqa-questions", "knowledge_source": "kilt-knowledge-source"},
    "2wiki": {"file": "2wiki", "aliases": "2wiki"},
    "msmarco-qa": {"file": "msmarco-qa", "ranking_queries": "msmarco-ranking", "ranking_qrels": "msmarco-ranking"},
}


class MissingDataError(DataError, FileNotFoundError):
    """A configured input file is absent and cannot be fetched; the message says where to get it."""


def normalize_spec(spec: str | Mapping) -> dict:
    return {"path": spec} if isinstance(spec, str) else dict(spec)


def local_path(spec: str | Mapping, data_dir: str) -> str:
    """Where the file of ``spec`` is (or lands, once downloaded)."""
    spec = normalize_spec(spec)
    if spec.get("path"):
        return str(spec["path"])
    name = PurePosixPath(urlparse(spec["url"]).path).name
    if not name:
        raise ValueError(f"cannot name a file after the URL {spec['url']!r}: give the spec a `path`")
    return str(Path(data_dir) / name)


def configured_files(config: Mapping) -> dict[tuple[str, str, str], tuple[dict, str]]:
    """``{(section, name, key): (spec, kind)}`` of every data file the validated config names
    (section ``corpora`` or ``datasets``; kind: where it is published, ``WHERE_TO_GET``)."""
    out = {}
    for section, files_by_source in (("corpora", CORPUS_FILES), ("datasets", DATASET_FILES)):
        for name, cfg in config[section].items():
            for key, kind in files_by_source.get(cfg["source"], {}).items():
                if cfg.get(key) is not None:
                    out[(section, name, key)] = (normalize_spec(cfg[key]), kind)
    return out


def data_paths(config: Mapping) -> dict[tuple[str, str, str], str]:
    """Where each data file of ``configured_files`` is (or lands once downloaded)."""
    return {key: local_path(spec, config["data_dir"]) for key, (spec, _) in configured_files(config).items()}


def downloads_and_missing(
    files: Mapping[tuple[str, str, str], tuple[dict, str]], data_dir: str
) -> tuple[dict[str, dict], dict[str, str]]:
    """The files of ``configured_files`` to download (path -> spec) and the local ones that are
    absent (path -> the message that says where to get them)."""
    downloads, missing = {}, {}
    for (section, name, key), (spec, kind) in files.items():
        path = local_path(spec, data_dir)
        if spec.get("url"):
            downloads[path] = spec
        elif not os.path.exists(path):
            missing[path] = missing_message(path, f"{section}.{name}.{key}", kind)
    return downloads, missing


def missing_message(path: str, key: str, kind: str, url: str | None = None) -> str:
    where = f"from {url}" if url else f"from {WHERE_TO_GET.get(kind, WHERE_TO_GET['local'])}"
    return (
        f"config key {key}: the input file '{path}' does not exist. Get it {where} and put it at "
        f"'{path}' (or point {key} at your copy), then rerun."
    )


def file_digest(path: str | os.PathLike, algorithm: str, block: int = 1 << 22) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def verify(path: str | os.PathLike, sha256: str | None = None, md5: str | None = None) -> str:
    """Check ``path`` against the given checksums; return its sha256. A DataFormatError (a ValueError)
    on a mismatch."""
    got = file_digest(path, "sha256")
    if sha256 and got.lower() != sha256.lower():
        raise DataFormatError(path, None, f"sha256 {got} does not match the configured {sha256}")
    if md5:
        got_md5 = file_digest(path, "md5")
        if got_md5.lower() != md5.lower():
            raise DataFormatError(path, None, f"md5 {got_md5} does not match the configured {md5}")
    return got


def download(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
    md5: str | None = None,
    retries: int,
    timeout: float,
    backoff: float = 2.0,
    log: logging.Logger = _log,
) -> str:
    """Fetch ``url`` to ``dest`` with retries, resuming a partial transfer; verify; return the sha256.

    The transfer goes to ``.<name>.part`` beside ``dest`` (kept between tries and runs, so a broken
    35 GB download resumes with an HTTP Range request) and ``dest`` appears only once verified.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f".{dest.name}.part")
    last_error: Exception | None = None
    for attempt in range(1, retries + 1):
        try:
            _fetch(url, part, timeout)
            last_error = None
            break
        except (urllib.error.URLError, OSError, TimeoutError, _Incomplete) as e:
            last_error = e
            log.warning("download %s: try %d of %d failed: %s", url, attempt, retries, e)
            if attempt < retries:
                time.sleep(backoff * attempt)
    if last_error is not None:
        checks = ", ".join(f"{k} {v}" for k, v in (("sha256", sha256), ("md5", md5)) if v) or "no checksum configured"
        raise MissingDataError(
            f"could not download {url} after {retries} tries ({last_error}). Without internet access, "
            f"download it by hand from {url} ({checks}) and put it at '{dest}', then rerun."
        )
    try:
        got = verify(part, sha256, md5)
    except ValueError as e:
        part.unlink(missing_ok=True)  # a corrupt transfer must not be resumed
        raise DataFormatError(
            f"download {url}", None, f"{e}; the partial file was removed, rerun to fetch it again"
        ) from None
    if not (sha256 or md5):
        log.warning("download %s: no checksum configured; got sha256 %s (pin it in config)", url, got)
    from llm_utility.io import atomic_path

    with atomic_path(dest) as tmp:
        os.replace(part, tmp)
    log.info("downloaded %s to %s (%d bytes, sha256 %s)", url, dest, dest.stat().st_size, got)
    return got


class _Incomplete(Exception):
    pass


def _fetch(url: str, part: Path, timeout: float) -> None:
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the partial file is already the whole file
            return
        raise
    with response:
        resumed = have and response.status == 206
        total = response.headers.get("Content-Length")
        expected = (have if resumed else 0) + int(total) if total is not None else None
        with open(part, "ab" if resumed else "wb") as f:
            while chunk := response.read(1 << 20):
                f.write(chunk)
    size = part.stat().st_size
    if expected is not None and size != expected:
        raise _Incomplete(f"got {size} of {expected} bytes")
