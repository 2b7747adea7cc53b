"""Benchmark the CPU arithmetic against float32 on the whole demo: speed side by side, and agreement.

Runs the demo DAG (config/config.yaml, every stage and query) twice from an empty store, each in a
work directory of its own that shares this checkout's materialized models: once with every LLM in
the reference arithmetic (float32) and once in the candidate (by default `auto`, what the demo runs
in on this CPU). Then it reports:
  - wall time of each run and the seconds spent inside model calls, per LLM (the store_stats lines
    of every job's log), and their ratio;
  - per stage (rule) and LLM, among the generation calls both runs made with the same prompt, the
    share of greedy outputs equal to float32's;
  - over the score calls both runs made (same prompt and target), the mean and largest |delta
    log-prob| per token; over the attention calls, the mean and largest |delta| of a passage's mass;
  - how many cells of Tables 1, 2 and 4 differ (any numeric difference).

    .venv/bin/python benchmarks/arithmetic_agreement.py [--workdir DIR] [--candidate auto]
        [--reference float32] [--reference-rev REV] [--reuse] [--cores all] [--json out.json]

`--reuse` skips a run whose results/ is already complete in DIR. `--compare-only` runs nothing and
compares what the two stores hold so far (tables only where both runs wrote them); `--candidate-dir`
and `--reference-dir` take a run's results from another work directory, for example a clone where
`make demo` ran. The demo models must be materialized (`snakemake --cores all
resources/models/<llm>/manifest.json`).

`--reference-rev REV` runs the reference from another revision of this repository instead: a git
worktree of REV (in DIR/source-REV) with its own Snakefile, config, prompts and library (on
PYTHONPATH, ahead of this checkout's), materializing its own models (their format changed over
time). `--reference-rev 4e3007d --reference float32` is the demo as it ran before the CPU engine
(transformers' `generate` on left-padded batches, float32): the engine's speed-up side by side in
one run, on calls both engines made with the same prompts.
Nothing is asserted: it measures and prints (docs/performance.md, "The CPU engine", keeps the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
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


def stored_calls(workdir: Path, llm: str) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(kind, prompt, target) -> (stage, value) over every shard of one LLM's store."""
    calls = {}
    for shard in sorted((workdir / "resources" / "cache" / "generation" / llm).glob("*.sqlite")):
        stage = shard.name.split("+", 1)[0]
        with sqlite3.connect(f"file:{shard}?immutable=1", uri=True) as db:
            for kind, prompt, target, value in db.execute("SELECT kind, prompt, target, value FROM calls"):
                calls.setdefault((kind, prompt, target), (stage, value))
    return calls


def compare_calls(reference: Path, candidate: Path, llm: str) -> dict:
    ref, cand = stored_calls(reference, llm), stored_calls(candidate, llm)
    shared = ref.keys() & cand.keys()
    equal: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    score_deltas, attention_deltas = [], []
    for key in shared:
        kind = key[0]
        (stage, a), (_, b) = ref[key], cand[key]
        if kind == "generate":
            equal[stage][0] += a == b
            equal[stage][1] += 1
        else:
            va, vb = json.loads(a), json.loads(b)
            if len(va) == len(vb):
                (score_deltas if kind == "score" else attention_deltas).extend(abs(x - y) for x, y in zip(va, vb))
    summary = lambda d: {"n": len(d), "mean": sum(d) / len(d) if d else None, "max": max(d) if d else None}  # noqa: E731
    return {
        "calls": {"reference": len(ref), "candidate": len(cand), "shared": len(shared)},
        "generate_equal": {stage: {"equal": e, "shared": n} for stage, (e, n) in sorted(equal.items())},
        "score_abs_delta_logprob": summary(score_deltas),
        "attention_abs_delta_mass": summary(attention_deltas),
    }


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
        moved = [
            (p is None) != (q is None) or (p is not None and abs(p - q) > 1e-12)
            for p, q in zip(a[col].to_list(), b[col].to_list(), strict=True)
        ]
        report["cells"] += len(moved)
        report["differ"] += sum(moved)
        if col in HEADLINE[title]:
            report["headline_cells"] += len(moved)
            report["headline_differ"] += sum(moved)
            delta = (a[col] - b[col]).abs().max()
            report["headline_max_delta"] = max(report["headline_max_delta"], delta or 0.0)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / "out" / "arithmetic_agreement")
    parser.add_argument("--reference", default="float32")
    parser.add_argument("--candidate", default="auto")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--cores", default="all")
    parser.add_argument("--compare-only", action="store_true")
    parser.add_argument("--candidate-dir", type=Path)
    parser.add_argument("--reference-dir", type=Path)
    parser.add_argument("--reference-rev")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from llm_utility.generation.cpu_arithmetic import cpu_flags, resolve_dtype

    flags = " ".join(name for name, on in cpu_flags().items() if on)
    resolved = resolve_dtype(args.candidate, cuda=False)
    print(f"CPU flags: {flags}; candidate {args.candidate} -> {resolved}; reference {args.reference}")
    if args.reference == args.candidate and not args.reference_rev:
        sys.exit("--reference and --candidate are the same arithmetic: give another, or --reference-rev")
    ref_name = f"{args.reference}@{args.reference_rev}" if args.reference_rev else args.reference
    dirs = {ref_name: args.reference_dir or args.workdir / ref_name, args.candidate: args.workdir / args.candidate}
    if args.candidate_dir:
        dirs[args.candidate] = args.candidate_dir
    given = {ref_name: args.reference_dir, args.candidate: args.candidate_dir}
    dtypes = {ref_name: args.reference, args.candidate: args.candidate}
    walls = {}
    for name, workdir in dirs.items():
        if args.compare_only or given[name]:
            walls[name] = None
            continue
        source = source_tree(args.workdir, args.reference_rev) if name == ref_name else REPO
        walls[name] = run_demo(workdir, prepare(workdir, dtypes[name], source), args.cores, args.reuse, source)
        print(f"{name}: demo wall time {'(reused)' if walls[name] is None else f'{walls[name]:.0f} s'}", flush=True)
    totals = {name: call_totals(d) for name, d in dirs.items()}
    llms = sorted(totals[ref_name])
    report = {
        "flags": flags,
        "candidate": resolved,
        "wall_seconds": walls,
        "calls": totals,
        "llms": {},
        "tables": {},
    }
    ref, cand = ref_name, args.candidate
    print(
        f"\n| LLM | model-call seconds, {ref} | {resolved} | ratio | calls made / served, {ref} | {resolved} |"
        "\n|---|--:|--:|--:|--:|--:|"
    )
    nan = {"seconds": float("nan"), "made": 0, "served": 0}
    for llm in [*llms, "all"]:
        if llm == "all":
            a, b = ({f: sum(t[f] for t in totals[n].values()) for f in nan} for n in (ref, cand))
        else:
            a, b = totals[ref][llm], totals[cand].get(llm, nan)
        print(
            f"| {llm} | {a['seconds']:,.0f} | {b['seconds']:,.0f} | {b['seconds'] / max(a['seconds'], 1e-9):.2f} "
            f"| {a['made']:,.0f} / {a['served']:,.0f} | {b['made']:,.0f} / {b['served']:,.0f} |"
        )
    stages = {name: stage_seconds(d) for name, d in dirs.items()}
    report["stage_seconds"] = stages
    print(f"\n| stage | model-call seconds, {ref} | {resolved} | ratio |\n|---|--:|--:|--:|")
    for stage in sorted(stages[ref].keys() | stages[cand].keys()):
        a, b = stages[ref].get(stage, 0.0), stages[cand].get(stage, 0.0)
        print(f"| {stage} | {a:,.0f} | {b:,.0f} | {b / a:.2f} |" if a else f"| {stage} | 0 | {b:,.0f} | - |")
    print("\n| LLM | stage | generations equal to " + ref_name + " |\n|---|---|--:|")
    for llm in llms:
        cmp = compare_calls(dirs[ref], dirs[cand], llm)
        report["llms"][llm] = cmp
        for stage, c in cmp["generate_equal"].items():
            print(f"| {llm} | {stage} | {c['equal']}/{c['shared']} ({100 * c['equal'] / max(1, c['shared']):.0f}%) |")
    print("\n| LLM | score |delta log-prob| mean / max (tokens) | attention |delta mass| mean / max |\n|---|--:|--:|")
    for llm, cmp in report["llms"].items():
        s, t = cmp["score_abs_delta_logprob"], cmp["attention_abs_delta_mass"]
        fmt = lambda d: "-" if d["mean"] is None else f"{d['mean']:.4f} / {d['max']:.4f} ({d['n']})"  # noqa: E731
        print(f"| {llm} | {fmt(s)} | {fmt(t)} |")
    print("\n| table | headline values that differ | largest move | all numeric cells that differ |\n|---|--:|--:|--:|")
    for title in TABLES:
        t = compare_table(dirs[ref], dirs[cand], title)
        report["tables"][title] = t
        if t["cells"] is None:
            print(f"| {title} | {t['note']} | | |")
            continue
        print(
            f"| {title} ({', '.join(HEADLINE[title])}) | {t['headline_differ']} of {t['headline_cells']} "
            f"| {t['headline_max_delta']:.1f} | {t['differ']} of {t['cells']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
