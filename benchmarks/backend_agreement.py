"""Benchmark a backend overlay against the transformers backend on the same data, call for call.

The overlay (default config/vllm-cpu.yaml: the demo's wf-claims with both LLMs on vLLM's CPU build)
is merged over the base config as Snakemake merges two config files (mapping by mapping; an entry
set to null is removed). The reference is the same merged config with every LLM the overlay moves
to vLLM put back on the transformers backend, in the overlay's arithmetic (float32), so that the
two runs differ in the engine only. Each runs from an empty store in a work directory of its own
that shares this checkout's materialized models. Then it reports:
  - wall time of each run and the seconds inside model calls per LLM (every job's store_stats lines);
  - per stage (rule) and LLM, among the generation calls both runs made with the same prompt, the
    share of greedy outputs equal, with the first differing ones;
  - the |delta log-prob| of the score calls and the |delta mass| of the attention calls both made;
  - every table and figure's CSV cell by cell, every figure byte for byte, and every other file of
    results/ (answers, gold sets, judgments, rankings: parquet, csv and json) equal or not.

    .venv/bin/python benchmarks/backend_agreement.py [--overlay config/vllm-cpu.yaml]
        [--workdir DIR] [--reuse] [--cores 2] [--only reference|candidate] [--compare-only]
        [--candidate-dir DIR] [--json out.json]

`--candidate-dir` takes the candidate's results from another work directory, for example this
checkout after `snakemake --cores all --configfile config/config.yaml config/vllm-cpu.yaml`.
Nothing is asserted: it measures and prints (docs/performance.md, "vLLM on a CPU", keeps the numbers).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import polars as pl
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arithmetic_agreement import call_seconds, compare_calls, run_demo, stored_calls  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# Files whose content is a measurement or a record of the run, not a result.
NOT_RESULTS = {"cost.csv", "cost.md", "config.yaml"}


def merge(base: dict, overlay: dict) -> dict:
    """``overlay`` merged over ``base`` as Snakemake merges --configfile files (nested mappings key by
    key, anything else replaced), then the entries the Snakefile removes (null in a named section)."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        out[key] = merge(out.get(key) or {}, value) if isinstance(value, dict) else copy.deepcopy(value)
    for section in ("corpora", "datasets", "retrievers", "llms"):
        for name in [n for n, v in (out.get(section) or {}).items() if v is None]:
            del out[section][name]
    return out


def configs(base: Path, overlay: Path) -> dict[str, dict]:
    """{'reference': transformers, 'candidate': the overlay}, with paths made absolute."""
    cand = merge(yaml.safe_load(base.read_text()), yaml.safe_load(overlay.read_text()))
    prompts = cand["prompts"] if isinstance(cand["prompts"], list) else [cand["prompts"]]
    cand["prompts"] = [str(REPO / p) for p in prompts]
    ref = copy.deepcopy(cand)
    for name, spec in cand["llms"].items():
        if spec.get("python"):
            spec["python"] = str((REPO / spec["python"]).absolute())
        if spec["backend"] != "transformers":
            ref["llms"][name]["backend"] = "transformers"
        ref["llms"][name].pop("python", None)  # the reference runs in Snakemake's own environment
    return {"reference": ref, "candidate": cand}


def prepare(workdir: Path, cfg: dict) -> Path:
    """A work directory sharing the checkout's materialized models, and its config file."""
    models = workdir / "resources" / "models"
    if not models.exists():
        models.parent.mkdir(parents=True, exist_ok=True)
        (REPO / "resources" / "models").mkdir(parents=True, exist_ok=True)
        models.symlink_to(REPO / "resources" / "models")
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def first_differences(reference: Path, candidate: Path, llm: str, n: int = 3) -> list[dict]:
    """Up to ``n`` generation calls both made whose outputs differ: stage, the two outputs, the prompt's end."""
    ref, cand = stored_calls(reference, llm), stored_calls(candidate, llm)
    out = []
    for key in sorted(ref.keys() & cand.keys()):
        if key[0] == "generate" and ref[key][1] != cand[key][1]:
            out.append(
                {"stage": ref[key][0], "prompt_end": key[1][-80:], "reference": ref[key][1], "candidate": cand[key][1]}
            )
            if len(out) == n:
                break
    return out


def _frame(path: Path) -> pl.DataFrame | None:
    try:
        if path.suffix == ".parquet":
            return pl.read_parquet(path)
        if path.suffix == ".csv":
            return pl.read_csv(path, infer_schema_length=None)
    except Exception:  # noqa: BLE001 - an unreadable file is reported as differing
        return None
    return None


def compare_frames(a: pl.DataFrame, b: pl.DataFrame, tolerance: float = 1e-9) -> dict:
    """Cells that differ (numbers beyond ``tolerance``), and the first row of each table that does."""
    if a.columns != b.columns or a.height != b.height:
        return {"cells": None, "differ": None, "note": f"shapes differ: {a.shape} against {b.shape}"}
    differ, cells, first = 0, 0, None
    for col in a.columns:
        x, y = a[col].to_list(), b[col].to_list()
        cells += len(x)
        for i, (p, q) in enumerate(zip(x, y)):
            numeric = isinstance(p, (int, float)) and isinstance(q, (int, float)) and not isinstance(p, bool)
            if (abs(p - q) > tolerance) if numeric and p == p and q == q else (p != q and not (p != p and q != q)):
                differ += 1
                if first is None:
                    first = {"row": a.row(i, named=True), "column": col, "reference": p, "candidate": q}
    return {"cells": cells, "differ": differ, "first": first}


def compare_results(reference: Path, candidate: Path) -> dict[str, dict]:
    """Every table, figure CSV and data file of results/ in either run, compared."""
    names = set()
    for root in (reference, candidate):
        names |= {
            p.relative_to(root / "results").as_posix()
            for p in (root / "results").rglob("*")
            if p.suffix in (".csv", ".parquet", ".json", ".png", ".pdf") and p.name not in NOT_RESULTS
        }
    out = {}
    for name in sorted(names):
        paths = [d / "results" / name for d in (reference, candidate)]
        if not all(p.is_file() for p in paths):
            out[name] = {"note": "only in the " + ("reference" if paths[0].is_file() else "candidate")}
        elif paths[0].suffix in (".png", ".pdf"):  # drawn from the CSVs beside them; byte for byte
            out[name] = {"equal": paths[0].read_bytes() == paths[1].read_bytes()}
        elif paths[0].suffix == ".json":
            same = json.loads(paths[0].read_text()) == json.loads(paths[1].read_text())
            out[name] = {"equal": same}
        else:
            a, b = _frame(paths[0]), _frame(paths[1])
            out[name] = {"note": "unreadable"} if a is None or b is None else compare_frames(a, b)
            out[name]["equal"] = out[name].get("differ") == 0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=REPO / "config" / "config.yaml")
    parser.add_argument("--overlay", type=Path, default=REPO / "config" / "vllm-cpu.yaml")
    parser.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / "out" / "backend_agreement")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--cores", default="2")
    parser.add_argument("--only", choices=("reference", "candidate"))
    parser.add_argument("--compare-only", action="store_true")
    parser.add_argument("--candidate-dir", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cfgs = configs(args.base, args.overlay)
    dirs = {name: args.workdir / name for name in cfgs}
    if args.candidate_dir:
        dirs["candidate"] = args.candidate_dir
    walls: dict[str, float | None] = {}
    for name, workdir in dirs.items():
        skip = args.compare_only or (args.only and name != args.only) or (args.candidate_dir and name == "candidate")
        if skip:
            walls[name] = None
            continue
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.strftime("%H:%M:%S")
        walls[name] = run_demo(workdir, prepare(workdir, cfgs[name]), args.cores, args.reuse)
        shown = "(reused)" if walls[name] is None else f"{walls[name]:.0f} s"
        print(f"{name}: started {started}, wall time {shown}", flush=True)
    if args.only:
        return
    seconds = {name: call_seconds(d) for name, d in dirs.items()}
    backend = {n: s["backend"] for n, s in cfgs["candidate"]["llms"].items()}
    report: dict = {"wall_seconds": walls, "call_seconds": seconds, "llms": {}, "differences": {}, "results": {}}
    print("\n| LLM | candidate backend | model-call seconds, transformers | candidate | ratio |\n|---|---|--:|--:|--:|")
    for llm in sorted(seconds["reference"]):
        a, b = seconds["reference"][llm], seconds["candidate"].get(llm, float("nan"))
        print(f"| {llm} | {backend.get(llm)} | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")
    print("\n| LLM | stage | generations equal to transformers' |\n|---|---|--:|")
    for llm in sorted(seconds["reference"]):
        cmp = compare_calls(dirs["reference"], dirs["candidate"], llm)
        report["llms"][llm] = cmp
        report["differences"][llm] = first_differences(dirs["reference"], dirs["candidate"], llm)
        for stage, c in cmp["generate_equal"].items():
            print(f"| {llm} | {stage} | {c['equal']}/{c['shared']} ({100 * c['equal'] / max(1, c['shared']):.0f}%) |")
    print(
        "\n| LLM | calls: transformers / candidate / both | score |delta log-prob| mean / max (tokens) "
        "| attention |delta mass| mean / max |\n|---|---|--:|--:|"
    )
    fmt = lambda d: "-" if d["mean"] is None else f"{d['mean']:.2e} / {d['max']:.2e} ({d['n']})"  # noqa: E731
    for llm, cmp in report["llms"].items():
        c = cmp["calls"]
        print(
            f"| {llm} | {c['reference']} / {c['candidate']} / {c['shared']} "
            f"| {fmt(cmp['score_abs_delta_logprob'])} | {fmt(cmp['attention_abs_delta_mass'])} |"
        )
    for llm, diffs in report["differences"].items():
        for d in diffs:
            print(f"differs ({llm}, {d['stage']}): transformers {d['reference']!r}, candidate {d['candidate']!r}")
    report["results"] = compare_results(dirs["reference"], dirs["candidate"])
    tables = {k: v for k, v in report["results"].items() if k.startswith(("tables/", "figures/"))}
    others = {k: v for k, v in report["results"].items() if k not in tables}
    print("\n| table or figure | cells that differ |\n|---|--:|")
    for name, r in tables.items():
        if name.endswith((".png", ".pdf")):
            print(f"| {name} | {'same bytes' if r['equal'] else 'bytes differ'} |")
            continue
        print(
            f"| {name} | {r['differ']} of {r['cells']} |"
            if r.get("cells") is not None
            else f"| {name} | {r.get('note', 'equal' if r.get('equal') else 'differs')} |"
        )
    unequal = [k for k, v in others.items() if not v.get("equal")]
    print(
        f"\nother results: {len(others) - len(unequal)} of {len(others)} files equal"
        + "".join(f"\n  differs: {k} ({others[k].get('differ', others[k].get('note', ''))})" for k in unequal)
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1, default=str))
        tmp.replace(args.json)


if __name__ == "__main__":
    main()
