"""Benchmark the demo DAG end to end (issue: answers and gold sets).

Runs `snakemake --cores all` on the embedded default from a clean results/ (and an empty generation
store), then reports:
  - wall time of the whole run and per stage (rule), from Snakemake's own log;
  - LLM calls made and served from the store, per model, against the number of unique prompts the
    DAG asked for (calls made == unique prompts means nothing was computed twice);
  - prompts/s per model (made / seconds spent generating);
  - that a second run with nothing changed does no work, and that a styling-only change of the
    figures reruns only figure jobs and makes zero LLM calls;
  - batch invariance: every stored prompt of each model regenerated one at a time, compared with
    the batched output in the store, with the one-at-a-time vs batched throughput on those prompts.

    .venv/bin/python benchmarks/demo_pipeline.py [--keep-models] [--sample N] [--json out.json]

Nothing here is asserted: it measures and prints (tests assert behaviour; benchmarks measure speed).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def run_snakemake(*args: str) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run([SNAKEMAKE, *args], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"snakemake {' '.join(args)} failed:\n{out.stderr[-4000:]}")
    return time.perf_counter() - started, out.stdout + out.stderr


def stage_times(log_text: str) -> dict[str, float]:
    """Seconds per rule: from each job's start ('[date]' + 'rule X:' + 'jobid: N') to 'Finished jobid: N'."""
    stamp = r"\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]"
    fmt = "%a %b %d %H:%M:%S %Y"
    started, rule_of, total = {}, {}, defaultdict(float)
    for m in re.finditer(stamp + r"\n(?:local)?rule (\w+):.*?jobid: (\d+)", log_text, re.S):
        started[m.group(3)] = datetime.strptime(" ".join(m.group(1).split()), fmt)
        rule_of[m.group(3)] = m.group(2)
    for m in re.finditer(stamp + r"\nFinished jobid: (\d+)", log_text):
        jobid = m.group(2)
        if jobid in started:
            end = datetime.strptime(" ".join(m.group(1).split()), fmt)
            total[rule_of[jobid]] += (end - started[jobid]).total_seconds()
    return dict(total)


def store_stats(logs: Path) -> dict[str, dict[str, float]]:
    """Calls made and served, tokens and seconds per model and kind, from every job's store_stats line."""
    per_model: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for log in logs.rglob("*.log"):
        for m in re.finditer(r"store_stats (\{.*\})", log.read_text()):
            s = json.loads(m.group(1))
            for kind, c in s["calls"].items():
                for key in ("made", "served", "seconds", "prompt_tokens"):
                    per_model[s["llm"]][f"{kind}_{key}"] += c[key]
                    per_model[s["llm"]][key] += c[key]
            per_model[s["llm"]]["jobs"] += 1
    return {k: dict(v) for k, v in per_model.items()}


def store_rows(store_dir: Path) -> dict[str, int]:
    """Distinct calls in each model's store (every shard)."""
    sys.path.insert(0, str(REPO / "src"))
    from llm_utility.generation.store import count_rows

    return (
        {root.name: count_rows(root) for root in sorted(p for p in store_dir.iterdir() if p.is_dir())}
        if store_dir.exists()
        else {}
    )


def dry_run_jobs(*args: str) -> dict[str, int]:
    _, text = run_snakemake("-n", "--cores", "all", *args)
    if "Nothing to be done" in text:
        return {}
    block = text.split("Job stats:")[1].split("Reasons:")[0] if "Job stats:" in text else ""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", block, re.M) if m.group(1) != "total"}


def batch_invariance(config: dict, sample: int | None) -> dict[str, dict]:
    """Regenerate stored prompts one at a time; compare with the batched outputs in the store."""
    sys.path.insert(0, str(REPO / "src"))
    from llm_utility.generation import load_generator

    report = {}
    for slug, spec in config["llms"].items():
        rows = []
        for db in sorted((REPO / config["store_dir"] / slug).glob("*.sqlite")):
            with sqlite3.connect(db) as con:
                rows += con.execute(
                    "SELECT prompt, value, params FROM calls WHERE kind = 'generate' ORDER BY key"
                ).fetchall()
        from llm_utility.config import with_defaults

        spec = {**with_defaults("llms", spec), "keep_loaded": None}  # timed in this process, not a model host
        # The answer calls (the LLM's own decoding limit); judgments have other limits.
        rows = [r for r in rows if json.loads(r[2])["max_new_tokens"] == spec["max_new_tokens"]]
        if sample:
            rows = rows[:sample]
        gen = load_generator(REPO / "resources" / "models" / slug / "manifest.json", spec)
        params = json.loads(rows[0][2])
        t0 = time.perf_counter()
        single = [gen.generate([p], params["max_new_tokens"], params["stop"])[0] for p, _, _ in rows]
        t_single = time.perf_counter() - t0
        t0 = time.perf_counter()
        prompts = [p for p, _, _ in rows]
        bs = spec["batch_size"]
        order = sorted(range(len(prompts)), key=lambda i: -len(gen.encode(prompts[i])))
        for i in range(0, len(order), bs):
            gen.generate([prompts[j] for j in order[i : i + bs]], params["max_new_tokens"], params["stop"])
        t_batched = time.perf_counter() - t0
        differ = [(p, o, s) for (p, o, _), s in zip(rows, single) if o != s]
        report[slug] = {
            "prompts": len(rows),
            "differ": len(differ),
            "single_prompts_per_s": round(len(rows) / t_single, 2),
            "batched_prompts_per_s": round(len(rows) / t_batched, 2),
            "speedup": round(t_single / t_batched, 2),
            "examples": [{"batched": o, "single": s} for _, o, s in differ[:3]],
        }
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep-models", action="store_true", help="keep resources/models (skip dequantization)")
    ap.add_argument("--sample", type=int, default=None, help="prompts per model for the batch-invariance check")
    ap.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    args = ap.parse_args()

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    store_dir = REPO / config["store_dir"]
    for path in [REPO / "results", REPO / "logs", REPO / "benchmarks" / "out", store_dir] + (
        [] if args.keep_models else [REPO / "resources" / "models"]
    ):
        shutil.rmtree(path, ignore_errors=True)

    report: dict = {}
    wall, text = run_snakemake("--cores", "all")
    report["first_run_seconds"] = round(wall, 1)
    report["stage_seconds"] = {k: round(v, 1) for k, v in sorted(stage_times(text).items(), key=lambda kv: -kv[1])}
    stats = store_stats(REPO / "logs")
    rows = store_rows(store_dir)
    report["llm_calls"] = {
        slug: {
            "made": int(s["made"]),
            "served": int(s["served"]),
            "unique_prompts": rows.get(slug, 0),
            "made_equals_unique": int(s["made"]) == rows.get(slug, 0),
            "jobs": int(s["jobs"]),
            "by_kind": {k: int(v) for k, v in s.items() if k.endswith(("_made", "_served"))},
            "calls_per_s": round(s["made"] / s["seconds"], 2) if s["seconds"] else None,
        }
        for slug, s in stats.items()
    }

    wall2, text2 = run_snakemake("--cores", "all")
    report["second_run"] = {"seconds": round(wall2, 1), "nothing_to_do": "Nothing to be done" in text2}

    with tempfile.TemporaryDirectory() as tmp:
        styled = dict(
            config, figures={**config.get("figures", {}), "dpi": config.get("figures", {}).get("dpi", 200) + 1}
        )
        cfg = Path(tmp) / "styled.yaml"
        cfg.write_text(yaml.safe_dump(styled, sort_keys=False))
        jobs = dry_run_jobs("--configfile", str(cfg))
        report["styling_change_reruns"] = jobs
        run_snakemake("--cores", "all", "--configfile", str(cfg))
        # New rows in the store = LLM calls made by the styled run.
        report["styling_change_llm_calls"] = sum(store_rows(store_dir).values()) - sum(rows.values())
        run_snakemake("--cores", "all")  # back to the default styling

    report["batch_invariance"] = batch_invariance(config, args.sample)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
