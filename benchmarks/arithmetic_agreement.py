"""Benchmark the CPU arithmetics against float32 on the whole demo: speed side by side, and agreement.

Runs the demo DAG (config/config.yaml, every stage and query) from an empty store once with every
LLM in the reference arithmetic (float32) and once in each candidate (`--candidates int8 bfloat16
auto`; by default `auto`, what the demo runs in on this CPU), each in a work directory of its own
(DIR/<name>) that shares this checkout's materialized models. Then it reports, per candidate against
the reference:
  - wall time of each run (of a run it did not make, its latest complete Snakemake log's) and the
    seconds inside model calls, per LLM and per stage (the store_stats lines of every job's log),
    and their ratio;
  - every stored call both runs made with the same prompt (and target): the generation calls whose
    greedy output is equal, per stage, per LLM and overall; over the score calls, the per-token
    |delta log-prob| (median, 95th percentile, largest); over the attention calls, the |delta| of a
    passage's mass (the same). Later stages' prompts hold earlier answers, so each candidate shares
    a set of calls of its own with the reference;
  - every cell of Tables 1, 2 and 4: the headline values that differ and their largest move, and all
    numeric cells that differ;
  - every gold set (results/<dataset>/<llm>/gold_C.parquet and gold_U.parquet): the (qid, pid) pairs
    in both runs' set, only the reference's and only the candidate's, and the queries whose gold set
    is identical; and the queries whose known flag (known.parquet) differs;
  - every finding's verdict (results/findings.json): those that differ, overall and per cell
    (dataset and LLM), and the effects that moved.
It prints a markdown table per section, headed by the date, this checkout's commit, the CPU model and
the flags that decide the arithmetic, and writes every number to --json.

    .venv/bin/python benchmarks/arithmetic_agreement.py [--workdir DIR]
        [--candidates int8 bfloat16 auto] [--reference float32] [--reference-rev REV] [--reuse]
        [--cores all] [--compare-only] [--reference-dir DIR] [--candidate-dir [NAME=]DIR ...]
        [--json out.json]

A candidate is named by the dtype each LLM ran in according to its run's cost table (before the
table exists, by what it resolves to on this CPU): `auto (bfloat16)`. `--reuse` skips a run whose
results/ is already complete in its directory. `--compare-only` runs nothing and compares what the
stores hold so far (tables, gold sets and findings only where both runs wrote them).
`--reference-dir DIR` and `--candidate-dir NAME=DIR` (repeatable; a bare DIR with a single
candidate) take a run's results from another work directory, for example a clone where `make demo`
ran. The demo models must be materialized (`snakemake --cores all
resources/models/<llm>/manifest.json`).

`--reference-rev REV` runs the reference from another revision of this repository instead: a git
worktree of REV (in DIR/source-REV) with its own Snakefile, config, prompts and library (on
PYTHONPATH, ahead of this checkout's), materializing its own models (their format changed over
time). `--reference-rev 4e3007d --reference float32` is the demo as it ran before the CPU engine
(transformers' `generate` on left-padded batches, float32): the engine's speed-up side by side in
one run, on calls both engines made with the same prompts.
Nothing is asserted: it measures and prints (docs/performance.md keeps the numbers).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
TABLES = {"Table 1": "table1_rag.csv", "Table 2": "table2_selection.csv", "Table 4": "table4_ranking.csv"}
# The values each table reports (the rest are their intervals, counts and parse shares).
HEADLINE = {
    "Table 1": ["correct"],
    "Table 2": ["precision", "recall", "f1"],
    "Table 4": ["ndcg", "recall"],
}
GOLD_SETS = ("gold_C", "gold_U")
# The fields that name a finding's cell (the rest are its numbers, notes and parse shares).
CELL_KEYS = ("dataset", "llm", "gold_from", "from", "method", "versus", "pair")
# Numbers closer than this are the same number (CSV and JSON round trips of one float).
SAME = 1e-12


def source_tree(workdir: Path, rev: str | None) -> Path:
    """The repository the run's Snakefile, config and library come from: this checkout, or a git
    worktree of ``rev`` in ``workdir`` (made once, reused)."""
    if rev is None:
        return REPO
    tree = workdir / f"source-{rev}"
    if not (tree / "Snakefile").is_file():
        out = subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev], capture_output=True, text=True
        )
        if out.returncode != 0:
            sys.exit(f"--reference-rev {rev}: git worktree add failed:\n{out.stderr}")
    return tree


def prepare(workdir: Path, dtype: str, source: Path = REPO) -> Path:
    """A work directory and its config: ``source``'s demo config in ``dtype``. A run of this checkout
    shares its materialized models; another revision's materializes its own."""
    workdir.mkdir(parents=True, exist_ok=True)
    models = workdir / "resources" / "models"
    if source == REPO and not models.exists():
        models.parent.mkdir(parents=True, exist_ok=True)
        models.symlink_to(REPO / "resources" / "models")
    cfg = yaml.safe_load((source / "config" / "config.yaml").read_text())
    cfg["prompts"] = [str(source / p) for p in cfg["prompts"]]
    for spec in cfg["llms"].values():
        spec["dtype"] = dtype
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_demo(workdir: Path, config: Path, cores: str, reuse: bool, source: Path = REPO) -> float | None:
    """Seconds of one whole-DAG run of ``source``'s Snakefile in ``workdir`` (None when reused)."""
    if reuse and (workdir / "results" / "tables" / "cost.csv").is_file():
        return None
    env = dict(os.environ)
    if source != REPO:  # its jobs import its own library, not this checkout's (installed editable)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source / "src"), env.get("PYTHONPATH")]))
    cmd = [
        SNAKEMAKE,
        "--snakefile",
        str(source / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(config),
        "--cores",
        cores,
    ]
    started = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"the demo failed in {workdir}:\n{out.stderr[-4000:]}")
    return time.perf_counter() - started


# --- seconds -------------------------------------------------------------------------------------


def _store_stats(workdir: Path) -> Iterator[dict]:
    for log in (workdir / "logs").rglob("*.log"):
        for m in re.finditer(r"store_stats (\{.*\})", log.read_text(errors="replace")):
            yield json.loads(m.group(1))


def call_totals(workdir: Path) -> dict[str, dict[str, float]]:
    """Per LLM, the seconds inside model calls and the calls made and served, from every job's store_stats line."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for stats in _store_stats(workdir):
        for calls in stats["calls"].values():
            for field in ("seconds", "made", "served"):
                totals[stats["llm"]][field] += calls.get(field, 0)
    return {llm: dict(t) for llm, t in totals.items()}


def call_seconds(workdir: Path) -> dict[str, float]:
    """Per LLM, the seconds inside model calls (``call_totals``' seconds)."""
    return {llm: t["seconds"] for llm, t in call_totals(workdir).items()}


def stage_seconds(workdir: Path) -> dict[str, float]:
    """Per stage (rule), the seconds inside model calls; ``answer_gold_C`` and ``answer_gold_U``, one
    rule in older revisions, count as ``answer_gold``."""
    seconds: dict[str, float] = defaultdict(float)
    for stats in _store_stats(workdir):
        stage = re.sub(r"^answer_gold_[CU]$", "answer_gold", stats.get("job", "?").split("+", 1)[0])
        seconds[stage] += sum(calls.get("seconds", 0) for calls in stats["calls"].values())
    return dict(seconds)


def logged_wall(workdir: Path) -> dict | None:
    """The wall time of the latest Snakemake run in ``workdir`` that finished every step it had
    (its log's "Elapsed time"), and how many steps that was: a run finished in pieces shows as fewer."""
    for log in sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"), reverse=True):
        text = log.read_text(errors="replace")
        done = re.search(r"^(\d+) of \1 steps \(100%\) done$", text, re.MULTILINE)
        elapsed = re.search(r"^Elapsed time: (?:(\d+) days?, )?(\d+):(\d+):([\d.]+)$", text, re.MULTILINE)
        if done and elapsed:
            days, hours, minutes, seconds = elapsed.groups()
            total = int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)
            return {"seconds": total, "steps": int(done.group(1)), "log": str(log)}
    return None


def arithmetic(workdir: Path) -> dict[str, str]:
    """Per LLM, the dtype its model stages ran in, as the run's cost table records it ({} before the
    table is written); an LLM that ran in more than one is given as "a+b"."""
    path = workdir / "results" / "tables" / "cost.csv"
    if not path.is_file():
        return {}
    cost = pl.read_csv(path, infer_schema_length=0)  # every column as text
    missing = {"llm", "dtype"} - set(cost.columns)
    if missing:
        sys.exit(f"{path}: no column {', '.join(sorted(missing))}")
    ran = cost.filter(pl.col("dtype").is_not_null() & (pl.col("dtype") != ""))
    return {
        llm: "+".join(sorted(group["dtype"].unique().to_list()))
        for (llm,), group in ran.group_by("llm", maintain_order=True)
    }


# --- stored calls --------------------------------------------------------------------------------


def stored_calls(workdir: Path, llm: str) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(kind, prompt, target) -> (stage, value) over every shard of one LLM's store."""
    calls = {}
    for shard in sorted((workdir / "resources" / "cache" / "generation" / llm).glob("*.sqlite")):
        stage = shard.name.split("+", 1)[0]
        with sqlite3.connect(f"file:{shard}?immutable=1", uri=True) as db:
            for kind, prompt, target, value in db.execute("SELECT kind, prompt, target, value FROM calls"):
                calls.setdefault((kind, prompt, target), (stage, value))
    return calls


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, interpolated linearly between the two nearest ranks
    (numpy's default): the median of 1, 2, 3, 4 is 2.5."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def summary(values: Sequence[float]) -> dict:
    """n, mean, median, 95th percentile and largest of ``values`` (None for each when there are none)."""
    if not values:
        return {"n": 0, "mean": None, "median": None, "p95": None, "max": None}
    return {
        "n": len(values),
        "mean": sum(values) / len(values),
        "median": percentile(values, 0.5),
        "p95": percentile(values, 0.95),
        "max": max(values),
    }


def compare_calls(reference: Path, candidate: Path, llm: str) -> dict:
    """Over the stored calls of ``llm`` both runs made (same kind, prompt and target): the generation
    calls whose output is equal, per stage (the reference's shard) and in all; the per-token |delta
    log-prob| of the score calls and the |delta| of each passage's attention mass (``summary``).
    A score or attention call whose two values differ in length is counted in ``unaligned``."""
    ref, cand = stored_calls(reference, llm), stored_calls(candidate, llm)
    shared = ref.keys() & cand.keys()
    equal: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    deltas: dict[str, list[float]] = {"score": [], "attention": []}
    unaligned = 0
    for key in shared:
        kind = key[0]
        (stage, a), (_, b) = ref[key], cand[key]
        if kind == "generate":
            equal[stage][0] += a == b
            equal[stage][1] += 1
        elif kind in deltas:
            va, vb = json.loads(a), json.loads(b)
            if len(va) != len(vb):
                unaligned += 1
                continue
            deltas[kind].extend(abs(x - y) for x, y in zip(va, vb, strict=True))
    return {
        "calls": {"reference": len(ref), "candidate": len(cand), "shared": len(shared), "unaligned": unaligned},
        "generate_equal": {stage: {"equal": e, "shared": n} for stage, (e, n) in sorted(equal.items())},
        "generate_equal_all": {"equal": sum(e for e, _ in equal.values()), "shared": sum(n for _, n in equal.values())},
        "score_abs_delta_logprob": summary(deltas["score"]),
        "attention_abs_delta_mass": summary(deltas["attention"]),
    }


# --- tables, gold sets, findings -----------------------------------------------------------------


def _differ(p: float | None, q: float | None) -> bool:
    return (p is None) != (q is None) or (p is not None and abs(p - q) > SAME)


def compare_table(reference: Path, candidate: Path, title: str) -> dict:
    """Numeric cells that differ: the table's headline values (and their largest move), and every cell."""
    name = TABLES[title]
    if not all((d / "results" / "tables" / name).is_file() for d in (reference, candidate)):
        return {"cells": None, "note": "not written by both runs (yet)"}
    a = pl.read_csv(reference / "results" / "tables" / name)
    b = pl.read_csv(candidate / "results" / "tables" / name)
    if a.columns != b.columns or a.height != b.height:
        return {"cells": None, "note": "the tables' shapes differ"}
    report = {"cells": 0, "differ": 0, "headline_cells": 0, "headline_differ": 0, "headline_max_delta": 0.0}
    for col in a.columns:
        if not (a[col].dtype.is_numeric() and b[col].dtype.is_numeric()):
            continue
        moved = [_differ(p, q) for p, q in zip(a[col].to_list(), b[col].to_list(), strict=True)]
        report["cells"] += len(moved)
        report["differ"] += sum(moved)
        if col in HEADLINE[title]:
            report["headline_cells"] += len(moved)
            report["headline_differ"] += sum(moved)
            delta = (a[col] - b[col]).abs().max()
            report["headline_max_delta"] = max(report["headline_max_delta"], delta or 0.0)
    return report


def _read(path: Path, columns: dict[str, type]) -> pl.DataFrame:
    frame = pl.read_parquet(path)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        sys.exit(f"{path}: no column {', '.join(missing)} (has {', '.join(frame.columns)})")
    return frame.select(list(columns))


def gold_sets(workdir: Path) -> dict[str, dict]:
    """Per "dataset/llm" with a gold set in ``workdir``'s results: each gold set as {qid: {pid}} and
    the known flags as {qid: bool} (absent files: None)."""
    results = workdir / "results"
    found = {}
    for path in sorted(results.glob("*/*/gold_[CU].parquet")):
        dataset, llm = path.parts[-3], path.parts[-2]
        found.setdefault(f"{dataset}/{llm}", path.parent)
    out = {}
    for key, folder in found.items():
        entry: dict = {}
        for name in GOLD_SETS:
            path = folder / f"{name}.parquet"
            if path.is_file():
                pairs = _read(path, {"qid": str, "pid": str})
                entry[name] = defaultdict(set)
                for qid, pid in pairs.iter_rows():
                    entry[name][qid].add(pid)
            else:
                entry[name] = None
        path = folder / "known.parquet"
        entry["known"] = dict(_read(path, {"qid": str, "known": bool}).iter_rows()) if path.is_file() else None
        out[key] = entry
    return out


def compare_gold(reference: Path, candidate: Path) -> dict[str, dict]:
    """Per "dataset/llm" and gold set: the (qid, pid) pairs in both runs' set, only in the reference's
    and only in the candidate's, and how many queries have an identical set (an empty one included)
    among the queries either run knows of (its known flags and gold sets); and the queries whose
    known flag differs (a query one run has no flag for counts as differing)."""
    ref, cand = gold_sets(reference), gold_sets(candidate)
    report = {}
    for key in sorted(ref.keys() | cand.keys()):
        a, b = ref.get(key), cand.get(key)
        if a is None or b is None:
            report[key] = {"note": f"written by the {'candidate' if a is None else 'reference'} only"}
            continue
        queries = set()
        for run in (a, b):
            queries |= set(run["known"] or ())
            for name in GOLD_SETS:
                queries |= set(run[name] or ())
        entry = {}
        for name in GOLD_SETS:
            if a[name] is None or b[name] is None:
                entry[name] = {"note": "not written by both runs"}
                continue
            pairs_a = {(q, p) for q, pids in a[name].items() for p in pids}
            pairs_b = {(q, p) for q, pids in b[name].items() for p in pids}
            entry[name] = {
                "both": len(pairs_a & pairs_b),
                "only_reference": len(pairs_a - pairs_b),
                "only_candidate": len(pairs_b - pairs_a),
                "queries": len(queries),
                "queries_identical": sum(a[name].get(q, set()) == b[name].get(q, set()) for q in queries),
            }
        if a["known"] is None or b["known"] is None:
            entry["known"] = {"note": "not written by both runs"}
        else:
            flagged = sorted(a["known"].keys() | b["known"].keys())
            differ = [q for q in flagged if a["known"].get(q) != b["known"].get(q)]
            entry["known"] = {"queries": len(flagged), "differ": len(differ), "qids": differ}
        report[key] = entry
    return report


def read_findings(workdir: Path) -> dict[str, dict] | None:
    path = workdir / "results" / "findings.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        sys.exit(f"{path}: expected an object with a list 'findings'")
    out = {}
    for i, finding in enumerate(data["findings"]):
        if "id" not in finding:
            sys.exit(f"{path}: finding {i} has no 'id'")
        out[finding["id"]] = finding
    return out


def cell_name(cell: dict) -> str:
    """A finding's cell by the fields that name it: "wf-single/smollm2-135m/gemma3-270m"."""
    return "/".join(str(cell[k]) for k in CELL_KEYS if cell.get(k) is not None)


def _named_cells(finding: dict) -> dict[str, dict]:
    """A finding's cells by ``cell_name``; a name that repeats gets its rank (" #2") so none is lost."""
    named: dict[str, dict] = {}
    for cell in finding.get("cells", []):
        name = base = cell_name(cell)
        rank = 1
        while name in named:
            rank += 1
            name = f"{base} #{rank}"
        named[name] = cell
    return named


def compare_findings(reference: Path, candidate: Path) -> dict:
    """The findings both runs report (by id): the verdicts that differ, overall and per cell (the
    cells both report, by ``cell_name``), and the effects that moved."""
    ref, cand = read_findings(reference), read_findings(candidate)
    if ref is None or cand is None:
        return {"findings": None, "note": "results/findings.json not written by both runs (yet)"}
    shared = [i for i in ref if i in cand]
    report: dict = {
        "findings": len(shared),
        "only_reference": [i for i in ref if i not in cand],
        "only_candidate": [i for i in cand if i not in ref],
        "verdicts_differ": [],
        "effects_differ": 0,
        "cells": 0,
        "cell_verdicts_differ": [],
        "cell_effects_differ": 0,
    }
    for finding_id in shared:
        a, b = ref[finding_id], cand[finding_id]
        if a.get("verdict") != b.get("verdict"):
            report["verdicts_differ"].append(
                {"id": finding_id, "reference": a.get("verdict"), "candidate": b.get("verdict")}
            )
        report["effects_differ"] += _differ(a.get("effect"), b.get("effect"))
        cells_b = _named_cells(b)
        for name, cell in _named_cells(a).items():
            other = cells_b.get(name)
            if other is None:
                continue
            report["cells"] += 1
            report["cell_effects_differ"] += _differ(cell.get("effect"), other.get("effect"))
            if cell.get("verdict") != other.get("verdict"):
                report["cell_verdicts_differ"].append(
                    {
                        "id": finding_id,
                        "cell": name,
                        "reference": cell.get("verdict"),
                        "candidate": other.get("verdict"),
                    }
                )
    return report


def compare_runs(reference: Path, candidate: Path, llms: Sequence[str]) -> dict:
    """Everything one candidate's run is compared on against the reference's."""
    return {
        "llms": {llm: compare_calls(reference, candidate, llm) for llm in llms},
        "tables": {title: compare_table(reference, candidate, title) for title in TABLES},
        "gold": compare_gold(reference, candidate),
        "findings": compare_findings(reference, candidate),
    }


# --- the machine ---------------------------------------------------------------------------------


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """The first processor's model name, family and model numbers ({} where /proc/cpuinfo is absent)."""
    if not cpuinfo.is_file():
        return {}
    fields = {"model name": "name", "cpu family": "family", "model": "model"}
    found = {}
    for line in cpuinfo.read_text(errors="replace").split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        if key.strip() in fields:
            found[fields[key.strip()]] = value.strip()
    return found


def commit() -> str:
    out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


# --- the report ----------------------------------------------------------------------------------


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _head(*columns: str, left: int = 1) -> list[str]:
    """A table's header: ``left`` text columns, then right-aligned numbers."""
    return ["", _row(*columns), "|" + "---|" * left + "--:|" * (len(columns) - left)]


def _share(equal: int, shared: int) -> str:
    return f"{equal}/{shared} ({100 * equal / shared:.0f}%)" if shared else "-"


def _spread(s: dict) -> str:
    return "-" if s["n"] == 0 else f"{s['median']:.3g} / {s['p95']:.3g} / {s['max']:.3g} ({s['n']:,})"


def _wall(run: dict) -> str:
    if run["wall_seconds"] is not None:
        return f"{run['wall_seconds']:,.0f} s"
    logged = run["logged_wall"]
    return "-" if logged is None else f"{logged['seconds']:,.0f} s (Snakemake's log, {logged['steps']} steps)"


def _ratio(seconds: float, reference: float) -> str:
    return f"{seconds:,.0f} ({seconds / reference:.2f})" if reference else f"{seconds:,.0f}"


def _header(report: dict, labels: list[str]) -> list[str]:
    cpu, runs = report["cpu"], report["runs"]
    ran = (
        f"{name}: " + (", ".join(f"{llm} {d}" for llm, d in run["arithmetic"].items()) or "-")
        for name, run in runs.items()
    )
    return [
        f"### {report['reference']} against {', '.join(labels)}: the whole demo",
        "",
        f"{report['date']}, commit {report['commit']}; CPU {cpu.get('name', '?')} (family {cpu.get('family', '?')}, "
        f"model {cpu.get('model', '?')}); flags: {report['flags'] or 'none'}.",
        "",
        "Arithmetic per LLM (cost tables): " + "; ".join(ran) + ".",
        "Wall time: " + "; ".join(f"{name} {_wall(run)}" for name, run in runs.items()) + ".",
    ]


def _seconds(report: dict, names: list[str], labels: list[str]) -> list[str]:
    ref, runs = report["reference"], report["runs"]
    lines = _head("LLM", f"model-call seconds, {ref}", *labels)
    for llm in [*report["llms"], "all"]:
        seconds = {
            name: sum(t["seconds"] for t in runs[name]["calls"].values())
            if llm == "all"
            else runs[name]["calls"].get(llm, {}).get("seconds", 0.0)
            for name in [ref, *names]
        }
        lines.append(_row(llm, f"{seconds[ref]:,.0f}", *(_ratio(seconds[n], seconds[ref]) for n in names)))
    lines += _head("stage", f"model-call seconds, {ref}", *labels)
    for stage in sorted(set().union(*(runs[n]["stage_seconds"] for n in [ref, *names]))):
        a = runs[ref]["stage_seconds"].get(stage, 0.0)
        lines.append(_row(stage, f"{a:,.0f}", *(_ratio(runs[n]["stage_seconds"].get(stage, 0.0), a) for n in names)))
    return lines


def _calls(report: dict, names: list[str], labels: list[str]) -> list[str]:
    ref, llms = report["reference"], report["llms"]
    cmp = {n: report["comparisons"][n]["llms"] for n in names}
    lines = _head("LLM", "stage", *(f"generations equal, {label}" for label in labels), left=2)
    for llm in llms:
        for stage in sorted(set().union(*(cmp[n][llm]["generate_equal"] for n in names))):
            cells = [cmp[n][llm]["generate_equal"].get(stage, {"equal": 0, "shared": 0}) for n in names]
            lines.append(_row(llm, stage, *(_share(c["equal"], c["shared"]) for c in cells)))
        lines.append(_row(llm, "**all**", *(_share(**cmp[n][llm]["generate_equal_all"]) for n in names)))
    overall = [[sum(cmp[n][llm]["generate_equal_all"][f] for llm in llms) for f in ("equal", "shared")] for n in names]
    lines.append(_row("**all**", "**all**", *(_share(e, s) for e, s in overall)))
    lines.append(
        "\nOver the calls both runs made with the same prompt: a later stage's prompts hold earlier stages'"
        " answers and gold sets, so each arithmetic shares a set of its own with the reference."
    )
    lines += _head("LLM", "stored calls", *labels, left=2)
    for llm in llms:
        made = cmp[names[0]][llm]["calls"]["reference"]
        shared = (f"{c['shared']:,} of {c['candidate']:,}" for c in (cmp[n][llm]["calls"] for n in names))
        lines.append(_row(llm, f"in both ({ref}: {made:,})", *shared))
        for kind, what in (
            ("score_abs_delta_logprob", "score: per-token \\|Δ log-prob\\| median / p95 / max (tokens)"),
            ("attention_abs_delta_mass", "attention: \\|Δ mass\\| median / p95 / max (passages)"),
        ):
            lines.append(_row(llm, what, *(_spread(cmp[n][llm][kind]) for n in names)))
    return lines


def _tables(report: dict, names: list[str], labels: list[str]) -> list[str]:
    lines = _head(
        "table (headline values)", *(f"headline differ, largest move; all cells differ, {lb}" for lb in labels)
    )
    for title in TABLES:
        cells = []
        for t in (report["comparisons"][n]["tables"][title] for n in names):
            cells.append(
                t["note"]
                if t["cells"] is None
                else f"{t['headline_differ']} of {t['headline_cells']}, {t['headline_max_delta']:.1f}; "
                f"{t['differ']} of {t['cells']}"
            )
        lines.append(_row(f"{title} ({', '.join(HEADLINE[title])})", *cells))
    return lines


def _gold_cell(name: str, g: dict) -> str:
    if "note" in g:
        return g["note"]
    if name == "known":
        return f"{g['differ']} of {g['queries']} flags differ"
    return f"{g['both']} / {g['only_reference']} / {g['only_candidate']}; {g['queries_identical']} of {g['queries']}"


def _gold(report: dict, names: list[str], labels: list[str]) -> list[str]:
    ref = report["reference"]
    gold = {n: report["comparisons"][n]["gold"] for n in names}
    parts = (*GOLD_SETS, "known")
    lines = _head(
        "dataset/LLM", "set", *(f"pairs both / {ref} only / {lb} only; queries identical" for lb in labels), left=2
    )
    totals = {n: {part: defaultdict(int) for part in parts} for n in names}
    for key in sorted(set().union(*gold.values())):
        for part in parts:
            cells = []
            for n in names:
                entry = gold[n].get(key, {"note": "not written by both runs"})
                g = entry.get(part, entry)  # a note on the whole entry stands for each part
                for field, value in g.items():
                    if field not in ("qids", "note"):
                        totals[n][part][field] += value
                cells.append(_gold_cell(part, g))
            lines.append(_row(key, part, *cells))
    for part in parts:
        lines.append(_row("**all**", part, *(_gold_cell(part, totals[n][part]) for n in names)))
    return lines


def _findings_table(report: dict, names: list[str], labels: list[str]) -> list[str]:
    ref = report["reference"]
    found = [report["comparisons"][n]["findings"] for n in names]
    lines = _head("finding", ref, *labels, left=len(names) + 2)
    if any(f["findings"] is None for f in found):
        return [*lines, _row("findings", "", *(f.get("note", "") for f in found))]
    for what, count, of in (
        ("verdicts that differ", lambda f: len(f["verdicts_differ"]), "findings"),
        ("effects that moved", lambda f: f["effects_differ"], "findings"),
        ("cell verdicts that differ", lambda f: len(f["cell_verdicts_differ"]), "cells"),
        ("cell effects that moved", lambda f: f["cell_effects_differ"], "cells"),
    ):
        lines.append(_row(what, "", *(f"{count(f)} of {f[of]}" for f in found)))
    changed = {d["id"]: d["reference"] for f in found for d in f["verdicts_differ"]}
    for finding_id, verdict in changed.items():
        moved = [{d["id"]: d["candidate"] for d in f["verdicts_differ"]}.get(finding_id) for f in found]
        lines.append(_row(finding_id, verdict, *(f"**{v}**" if v else "=" for v in moved)))
    for label, f in zip(labels, found, strict=True):
        if f["cell_verdicts_differ"]:
            cells = (f"{d['id']} {d['cell']}: {d['reference']} -> {d['candidate']}" for d in f["cell_verdicts_differ"])
            lines.append(f"\nCell verdicts that differ, {ref} -> {label}: " + "; ".join(cells) + ".")
    return lines


def markdown(report: dict) -> str:
    """The report in markdown: the machine and the runs, then a table per section."""
    names = list(report["candidates"])
    labels = [report["candidates"][n]["label"] for n in names]
    sections = (_header(report, labels),) + tuple(
        section(report, names, labels) for section in (_seconds, _calls, _tables, _gold, _findings_table)
    )
    return "\n".join(line for section in sections for line in section)


# --- the command ---------------------------------------------------------------------------------


def candidate_dirs(values: Sequence[str], candidates: Sequence[str]) -> dict[str, Path]:
    """``--candidate-dir`` values: NAME=DIR for a candidate NAME, or a bare DIR when there is one candidate."""
    dirs = {}
    for value in values:
        name, sep, path = value.partition("=")
        if sep and name in candidates:
            dirs[name] = Path(path)
        elif len(candidates) == 1:
            dirs[candidates[0]] = Path(value)
        else:
            sys.exit(f"--candidate-dir {value}: give it as NAME=DIR with NAME one of {', '.join(candidates)}")
    return dirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / "out" / "arithmetic_agreement")
    parser.add_argument("--reference", default="float32")
    parser.add_argument("--candidates", "--candidate", nargs="+", default=["auto"], metavar="DTYPE")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--cores", default="all")
    parser.add_argument("--compare-only", action="store_true")
    parser.add_argument("--candidate-dir", action="append", default=[], metavar="[NAME=]DIR")
    parser.add_argument("--reference-dir", type=Path)
    parser.add_argument("--reference-rev")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from llm_utility.generation.cpu_arithmetic import cpu_flags, resolve_dtype

    candidates = list(dict.fromkeys(args.candidates))
    ref_name = f"{args.reference}@{args.reference_rev}" if args.reference_rev else args.reference
    if ref_name in candidates:
        sys.exit(f"--reference {args.reference} is among --candidates: give others, or --reference-rev")
    given = {ref_name: args.reference_dir, **candidate_dirs(args.candidate_dir, candidates)}
    dirs = {ref_name: given[ref_name] or args.workdir / ref_name}
    dirs |= {name: given.get(name) or args.workdir / name for name in candidates}
    flags = " ".join(name for name, on in cpu_flags().items() if on)
    resolved: dict[str, str | None] = {}
    for name in candidates:
        try:
            resolved[name] = resolve_dtype(name, cuda=False)
        except (ValueError, TypeError) as error:  # e.g. int8 without fbgemm: a given directory may still hold it
            print(f"{name}: not resolved on this machine ({error})")
            resolved[name] = None
    print(
        f"CPU flags: {flags}; reference {ref_name}; candidates " + ", ".join(f"{n} -> {r}" for n, r in resolved.items())
    )

    walls: dict[str, float | None] = {}
    for name, workdir in dirs.items():
        if args.compare_only or given.get(name):
            walls[name] = None
            continue
        source = source_tree(args.workdir, args.reference_rev) if name == ref_name else REPO
        dtype = args.reference if name == ref_name else name
        walls[name] = run_demo(workdir, prepare(workdir, dtype, source), args.cores, args.reuse, source)
        print(f"{name}: demo wall time {'(reused)' if walls[name] is None else f'{walls[name]:.0f} s'}", flush=True)

    runs = {
        name: {
            "dir": str(d),
            "wall_seconds": walls[name],
            "logged_wall": logged_wall(d),
            "arithmetic": arithmetic(d),
            "calls": call_totals(d),
            "stage_seconds": stage_seconds(d),
        }
        for name, d in dirs.items()
    }
    llms = sorted(runs[ref_name]["calls"])
    labelled = {}
    for name in candidates:
        ran = sorted(set(runs[name]["arithmetic"].values()))
        what = "/".join(ran) if ran else resolved[name] or name  # what ran, else what would run here
        labelled[name] = {
            "resolved": resolved[name],
            "label": f"{name} ({what})" if what != name else name,
        }
    report = {
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "cpu": cpu_model(),
        "flags": flags,
        "reference": ref_name,
        "candidates": labelled,
        "llms": llms,
        "runs": runs,
        "comparisons": {name: compare_runs(dirs[ref_name], dirs[name], llms) for name in candidates},
    }
    print("\n" + markdown(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
