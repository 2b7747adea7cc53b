"""Logging for workflow scripts: everything a job prints to stderr (progress bars, warnings,
tracebacks) goes to the rule's ``log:`` file, as in the snakemake-workflows style.

A job that stops on bad input (``DataError``: a malformed, inconsistent or missing data file) says so
in one line on the terminal Snakemake prints to, as ``python -m llm_utility.init`` does:
``error: FILE, line N: PROBLEM``; its traceback stays in the log. Any other failure prints its
traceback there too. The line is also kept in ``DATA_ERRORS``, which the workflow's ``onerror``
hook prints at the end of the run (rules/common.smk), where a cluster job's terminal is not seen.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import traceback
from pathlib import Path
from types import TracebackType
from typing import TextIO

# Relative to the working directory, which the jobs share with Snakemake (on a cluster too).
DATA_ERRORS = Path("logs/data_errors.txt")


class DataError(Exception):
    """An input the workflow cannot use: a malformed or inconsistent data file, a file it cannot get.
    The message is one line naming the file (and the line, where there is one) and the problem."""


def log_to(path: str) -> logging.Logger:
    """Send stderr and the ``llm_utility`` logger to ``path``; return the logger. An exception that
    ends the job is then reported by ``report_failure``."""
    terminal = sys.stderr
    sys.stderr = open(path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 (lives as long as the job)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    sys.excepthook = functools.partial(report_failure, terminal)
    return logging.getLogger("llm_utility")


def report_failure(terminal: TextIO, kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
    """The exception that ends a job: its traceback into the log (stderr), and on ``terminal`` the one
    line of a ``DataError`` (also added to ``DATA_ERRORS``), or the traceback of anything else."""
    traceback.print_exception(kind, error, tb, file=sys.stderr)
    sys.stderr.flush()
    if isinstance(error, DataError):
        line = f"error: {error}"
        print(line, file=terminal, flush=True)
        try:
            DATA_ERRORS.parent.mkdir(parents=True, exist_ok=True)
            with open(DATA_ERRORS, "a", encoding="utf-8") as fh:  # one short write: whole lines
                fh.write(line.replace("\n", " ") + os.linesep)
        except OSError:
            pass  # the line is on the terminal and in the log already
    else:
        traceback.print_exception(kind, error, tb, file=terminal)


def clear_data_errors() -> None:
    """Forget the data errors of earlier runs (the workflow's ``onstart``)."""
    DATA_ERRORS.unlink(missing_ok=True)


def print_data_errors(stream: TextIO) -> None:
    """The workflow's ``onerror``: the one-line data errors its jobs stopped on, if any."""
    try:
        lines = DATA_ERRORS.read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    if lines:
        print("The run stopped on bad input (each job's log has the traceback):", file=stream)
        for line in dict.fromkeys(lines):
            print(f"  {line}", file=stream)
