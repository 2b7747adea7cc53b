"""Reading the publishers' files: plain, gzipped or inside a tar/zip archive, line by line, strictly.

Every reader here turns a problem into ``DataFormatError`` naming the file, the 1-based line and what
is wrong, so no input is ever silently damaged:

- text must be UTF-8 (a UTF-8 byte-order mark is dropped); a UTF-16/UTF-32 file (byte-order mark or
  NUL bytes) and any byte sequence that is not UTF-8 stop with the line and the column of the bad byte;
- JSON errors name the line and the column within that line (the newline is not part of the line,
  so an object cut short reports the column just past its last character, "at the end of the line");
- ids are stripped of surrounding whitespace (``" 7"`` and ``"7"`` are the same id, and a second one
  is a duplicate).

Files are opened by path; ``member`` names the file inside a ``.tar``/``.tar.gz``/``.tgz``/``.zip``
archive (MS MARCO ships ``collection.tsv`` inside ``collection.tar.gz``). A ``.gz`` file is gunzipped
on the fly. Nothing here reads a whole file into memory except ``read_json_document``.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import tarfile
import zipfile
from collections.abc import Iterator
from typing import IO

from ..logs import DataError


class DataFormatError(DataError, ValueError):
    """A data file is malformed; the message names the file, the line and the problem (a job stops on
    it with that one line: ``logs.DataError``)."""

    def __init__(self, path: str | os.PathLike, line: int | None, problem: str):
        self.path, self.line, self.problem = str(path), line, problem
        where = f"{self.path}, line {line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


def display_name(path: str | os.PathLike, member: str | None = None) -> str:
    """How errors name a file: ``archive.tar.gz:member.tsv`` for an archive member."""
    return f"{path}:{member}" if member else str(path)


_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")


@contextlib.contextmanager
def open_binary(path: str | os.PathLike, member: str | None = None) -> Iterator[IO[bytes]]:
    """A binary stream of ``path`` (gunzipped if ``.gz``) or of ``member`` inside an archive."""
    name = str(path)
    if member is not None or name.endswith(_ARCHIVE_SUFFIXES):
        if member is None:
            raise DataFormatError(path, None, "an archive: name the file to read inside it with `member:`")
        if name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                try:
                    f = zf.open(member)
                except KeyError:
                    raise DataFormatError(path, None, f"no member {member!r} in the archive") from None
                with f:
                    yield f
            return
        # Stream mode ("r|*") reads the archive once, front to back, without seeking.
        with tarfile.open(path, mode="r|*") as tf:
            for info in tf:
                if info.name.lstrip("./") == member.lstrip("./") and info.isfile():
                    f = tf.extractfile(info)
                    assert f is not None
                    with f:
                        yield f
                    return
        raise DataFormatError(path, None, f"no member {member!r} in the archive")
    if name.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            yield f
        return
    with open(path, "rb") as f:
        yield f


def _check_not_utf16(name: str, first: bytes) -> None:
    boms = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32", b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}
    for bom, enc in boms.items():
        if first.startswith(bom):
            raise DataFormatError(
                name, 1, f"the file is {enc}-encoded; convert it to UTF-8 (e.g. iconv -f {enc} -t UTF-8)"
            )
    if b"\x00" in first[:4096]:
        raise DataFormatError(name, 1, "the file has NUL bytes: UTF-16/32 text or a binary file, not UTF-8 text")


def decode_line(name: str, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFormatError(
            name, lineno, f"not UTF-8: byte 0x{raw[e.start]:02x} at column {e.start + 1} ({e.reason})"
        ) from None


def iter_lines(path: str | os.PathLike, member: str | None = None) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, line without its line ending) of a UTF-8 text file."""
    name = display_name(path, member)
    with open_binary(path, member) as f:
        first = True
        for lineno, raw in enumerate(f, start=1):
            if first:
                _check_not_utf16(name, raw)
                if raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                first = False
            yield lineno, decode_line(name, lineno, raw).rstrip("\r\n")


def parse_json_line(name: str, lineno: int, line: str):
    """``json.loads`` of one line; errors name the line and the column within it."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise DataFormatError(name, lineno, f"invalid JSON ({_json_problem(e)})") from None


def _json_problem(e: json.JSONDecodeError) -> str:
    """What ``json`` found wrong, with the column once. Some of its messages end in "at" and mean the
    column where a string or object starts ("Unterminated string starting at"); a column past the
    last character of its line means "the line ended"."""
    if e.msg.endswith(" at"):
        return f"{e.msg} column {e.colno}"
    end = e.doc.find("\n", e.pos)
    if not e.doc[e.pos : end if end >= 0 else None].strip():
        return f"{e.msg} at the end of the line, column {e.colno}"
    return f"{e.msg} at column {e.colno}"


def iter_jsonl(path: str | os.PathLike, member: str | None = None) -> Iterator[tuple[int, object]]:
    """Yield (line number, parsed value) for every non-blank line of a JSON Lines file."""
    name = display_name(path, member)
    for lineno, line in iter_lines(path, member):
        if line.strip():
            yield lineno, parse_json_line(name, lineno, line)


def read_json_document(path: str | os.PathLike, member: str | None = None):
    """Parse a file holding one JSON document (2WikiMultihopQA's dev.json, MS MARCO's dev_v2.1.json).

    These files are tens to hundreds of MB; they are parsed whole (docs/performance.md, "Data preparation at scale").
    """
    name = display_name(path, member)
    with open_binary(path, member) as f:
        data = f.read()
    _check_not_utf16(name, data[:4096])
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        lineno = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataFormatError(name, lineno, f"not UTF-8: byte 0x{data[e.start]:02x} at column {column}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataFormatError(name, e.lineno, f"invalid JSON ({_json_problem(e)})") from None


def as_id(value) -> str | None:
    """An id from a string or an integer, stripped of surrounding whitespace; None if unusable.

    ``True`` is not an id, and neither is an empty or blank string.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None
