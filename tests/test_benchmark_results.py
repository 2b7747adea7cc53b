"""benchmarks/results/*.csv, the record of every measured run (docs/performance.md keeps today's
numbers, these files the history), stays data a script can read: each file parses and is described
in its README, every row has a real date and CPU, the commits it names are in this repository's
history, a measurement is not dated after the commit that wrote it down, numbers stand where numbers
belong, and a run's parts add up to its whole."""

from __future__ import annotations

import csv
import re
import subprocess
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
COMMON = ["date", "date_source", "commit", "cpu", "flags", "kernels", "recorded_in"]
FLAGS = {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8"}
KERNELS = {
    "",
    "AVX2",
    "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16",
    "ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI",
    "ONEDNN_MAX_CPU_ISA below AMX",
}
# Columns that hold a number, or a range `lo-hi` over repeated runs.
NUMERIC = {
    "demo_runs.csv": [
        "wall_s",
        "install_s",
        "jobs",
        "jobs_wall_s",
        "job_seconds",
        "model_jobs",
        "model_job_seconds",
        "call_seconds",
        "call_seconds_gemma3",
        "call_seconds_smollm2",
        "calls_made",
        "calls_served",
        "prompt_tokens",
        "generated_tokens",
    ],
    "test_runs.csv": ["tests", "passed", "skipped", "failed", "wall_s", "install_s", "pytest_s", "user_cpu_s"],
    "stage_costs.csv": [
        "jobs",
        "calls_made",
        "calls_served",
        "prompt_tokens",
        "generated_tokens",
        "job_seconds",
        "cpu_seconds",
        "call_seconds",
    ],
    "engine_rates.csv": [
        "gemm_gflops",
        "smollm2_prefill_tok_s",
        "smollm2_decode_tok_s",
        "gemma3_prefill_tok_s",
        "gemma3_decode_tok_s",
    ],
    "agreement.csv": ["equal", "compared"],
    "fidelity_floor.csv": [
        "generate_calls",
        "greedy_equal",
        "greedy_share",
        "score_median",
        "score_p95",
        "score_max",
        "continuation_median",
        "continuation_p95",
        "continuation_max",
        "seconds",
    ],
    "measurements.csv": ["value"],
}
NUMBER = r"\d+(?:\.\d+)?(?:e-?\d+)?"


def _rows(name: str) -> list[dict]:
    with open(RESULTS / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _value(text: str) -> tuple[float, float] | None:
    """A number or a range `lo-hi`, as (lo, hi); None for an empty cell. Anything else fails."""
    if text == "":
        return None
    m = re.fullmatch(rf"({NUMBER})(?:-({NUMBER}))?", text)
    assert m, f"not a number or a range: {text!r}"
    lo, hi = float(m.group(1)), float(m.group(2) or m.group(1))
    assert lo <= hi, f"a range whose low end is above its high end: {text!r}"
    return lo, hi


@cache
def _history() -> dict[str, str]:
    """Every commit of HEAD's history: full hash -> its commit day (UTC)."""
    if subprocess.run(["git", "rev-parse", "--git-dir"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    shallow = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True, text=True
    ).stdout
    if shallow.strip() == "true":
        pytest.skip("a shallow clone lacks the history the rows name")
    out = subprocess.run(
        ["git", "log", "--format=%H %ct", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return {
        sha: datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%d")
        for sha, ts in (line.split() for line in out.splitlines())
    }


def _commit_day(short: str) -> str:
    matches = [day for sha, day in _history().items() if sha.startswith(short)]
    assert len(matches) == 1, f"commit {short} is not (exactly once) in this repository's history"
    return matches[0]


def test_every_file_is_described_and_every_described_file_exists():
    readme = (RESULTS / "README.md").read_text(encoding="utf-8")
    described = set(re.findall(r"^\| `([\w.]+\.csv)` \|", readme, re.M))
    assert described == {p.name for p in RESULTS.glob("*.csv")} == set(NUMERIC)


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_rows_parse_with_real_dates_cpus_and_numbers(name):
    rows = _rows(name)
    assert rows, f"{name} has no rows"
    for i, row in enumerate(rows, 2):
        where = f"{name}:{i}"
        assert None not in row and None not in row.values(), f"{where}: a row with more or fewer fields than the header"
        assert set(COMMON) <= set(row), f"{name}: columns missing: {set(COMMON) - set(row)}"
        date = row["date"]
        fmt = "%Y-%m-%d %H:%M" if " " in date else "%Y-%m-%d"
        try:
            datetime.strptime(date, fmt)
        except ValueError:
            pytest.fail(f"{where}: not a date: {date!r}")
        assert row["date_source"] in ("measured", "recorded"), where
        assert row["date_source"] == "measured" or row["recorded_in"], f"{where}: a recorded date needs recorded_in"
        assert row["cpu"], f"{where}: no cpu (write `not recorded` where the note did not say)"
        assert set(row["flags"].split()) <= FLAGS, f"{where}: unknown CPU flags {row['flags']!r}"
        assert row["kernels"] in KERNELS, f"{where}: unknown kernel cap {row['kernels']!r}"
        for column in NUMERIC[name]:
            try:
                _value(row[column])
            except AssertionError as error:
                pytest.fail(f"{where}, {column}: {error}")
        if name == "measurements.csv":
            assert row["what"] and row["unit"] and row["value"], f"{where}: what, value and unit are required"


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_commits_are_in_the_history_and_no_measurement_postdates_its_record(name):
    for i, row in enumerate(_rows(name), 2):
        where = f"{name}:{i}"
        if row["commit"]:
            _commit_day(row["commit"])
        if not row["recorded_in"]:
            continue
        recorded = _commit_day(row["recorded_in"])
        day = row["date"][:10]
        if row["date_source"] == "recorded":
            assert day == recorded, f"{where}: a recorded date is its recorded_in commit's day, {recorded}"
        else:
            assert day <= recorded, f"{where}: measured on {day}, after the commit that wrote it down ({recorded})"


def _number(row: dict, column: str) -> float | None:
    value = _value(row[column])
    return None if value is None else value[0]


@pytest.mark.parametrize(("name", "parts"), [("demo_runs.csv", "jobs_wall_s"), ("test_runs.csv", "pytest_s")])
def test_a_runs_parts_add_up_to_its_whole(name, parts):
    """Installs plus the jobs (or pytest) make the wall time, within the rounding of the notes' "~"
    (5%); a transcription slip of a minute for ten fails it."""
    checked = 0
    for i, row in enumerate(_rows(name), 2):
        wall, install, rest = (_number(row, c) for c in ("wall_s", "install_s", parts))
        if None in (wall, install, rest):
            continue
        checked += 1
        assert abs(install + rest - wall) <= 0.05 * wall, f"{name}:{i}: {install} + {rest} s is not {wall} s"
    assert checked >= 10


def test_demo_runs_calls_and_seconds_are_consistent():
    for i, row in enumerate(_rows("demo_runs.csv"), 2):
        where = f"demo_runs.csv:{i}"
        made, served = _number(row, "calls_made"), _number(row, "calls_served")
        if made is not None and served is not None:
            assert served <= made, f"{where}: more calls served from the store than made"
        # Time inside the calls is part of the model jobs' time, which is part of all jobs' time.
        chain = [_number(row, c) for c in ("call_seconds", "model_job_seconds", "job_seconds")]
        known = [v for v in chain if v is not None]
        assert known == sorted(known), f"{where}: call <= model-job <= job seconds fails: {chain}"
        gemma, smol, calls = (_number(row, c) for c in ("call_seconds_gemma3", "call_seconds_smollm2", "call_seconds"))
        if None not in (gemma, smol, calls):
            assert abs(gemma + smol - calls) <= 1, f"{where}: the two LLMs' call seconds do not sum to the total"


def test_agreement_counts_are_shares():
    for i, row in enumerate(_rows("agreement.csv"), 2):
        assert 0 <= int(row["equal"]) <= int(row["compared"]), f"agreement.csv:{i}"
