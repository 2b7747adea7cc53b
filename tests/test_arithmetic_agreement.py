"""benchmarks/arithmetic_agreement.py's comparisons, on stores, tables, gold sets and findings built
here with known differences (no models, no Snakemake): each number is counted out by hand below."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path

import polars as pl
import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("arithmetic_agreement", REPO / "benchmarks" / "arithmetic_agreement.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def write_store(workdir: Path, llm: str, shard: str, rows: list[tuple[str, str, str, object]]) -> None:
    store = workdir / "resources" / "cache" / "generation" / llm
    store.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(store / f"{shard}+dataset=d+llm={llm}.20261205T000000-abc.sqlite") as db:
        db.execute("CREATE TABLE calls (kind TEXT, prompt TEXT, target TEXT, value TEXT)")
        db.executemany(
            "INSERT INTO calls VALUES (?, ?, ?, ?)",
            [(k, p, t, v if isinstance(v, str) else json.dumps(v)) for k, p, t, v in rows],
        )


def write_gold(workdir: Path, dataset: str, llm: str, **sets: dict[str, list[str]] | dict[str, bool]) -> None:
    folder = workdir / "results" / dataset / llm
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in sets.items():
        if name == "known":
            frame = pl.DataFrame({"qid": list(content), "known": list(content.values())})
        else:
            pairs = [(q, p) for q, pids in content.items() for p in pids]
            frame = pl.DataFrame(
                {"qid": [q for q, _ in pairs], "pid": [p for _, p in pairs]},
                schema=[("qid", pl.String), ("pid", pl.String)],
            )
        frame.write_parquet(folder / f"{name}.parquet")


def write_findings(workdir: Path, findings: list[dict]) -> None:
    (workdir / "results").mkdir(parents=True, exist_ok=True)
    (workdir / "results" / "findings.json").write_text(json.dumps({"settings": {}, "findings": findings}))


def test_percentile_and_summary_interpolate_between_ranks():
    values = [0.5, 0.1, 0.4, 0.2, 0.3]
    # ranks 0..4 of 0.1..0.5; the 95th percentile sits at rank 0.95 * 4 = 3.8: 0.4 + 0.8 * (0.5 - 0.4)
    assert bench.summary(values) == pytest.approx({"n": 5, "mean": 0.3, "median": 0.3, "p95": 0.48, "max": 0.5})
    assert bench.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert bench.summary([2.0]) == {"n": 1, "mean": 2.0, "median": 2.0, "p95": 2.0, "max": 2.0}
    assert bench.summary([]) == {"n": 0, "mean": None, "median": None, "p95": None, "max": None}


def test_compare_calls_counts_equal_generations_per_stage_and_the_deltas_of_shared_calls(tmp_path):
    ref, cand = tmp_path / "float32", tmp_path / "int8"
    write_store(ref, "llm-a", "answer_candidates", [
        ("generate", "q1", "", "Lima"),
        ("generate", "q2", "", "Oslo"),
        ("generate", "q3", "", "Rome"),  # only the reference made it
        ("score", "p", "t1", [-1.0, -2.0, -3.0]),
        ("score", "p", "t2", [-0.5]),
        ("score", "p", "t3", [-1.0, -1.0]),  # the candidate's has another length
    ])  # fmt: skip
    write_store(ref, "llm-a", "judge", [("generate", "j1", "", "SUPPORTS"), ("attention", "a", "", [0.25, 0.75])])
    write_store(cand, "llm-a", "answer_candidates", [
        ("generate", "q1", "", "Lima"),
        ("generate", "q2", "", "Bergen"),
        ("generate", "q4", "", "Paris"),  # only the candidate made it
        ("score", "p", "t1", [-1.5, -2.0, -2.0]),
        ("score", "p", "t2", [-0.75]),
        ("score", "p", "t3", [-1.0]),
    ])  # fmt: skip
    write_store(cand, "llm-a", "judge", [("generate", "j1", "", "SUPPORTS"), ("attention", "a", "", [0.375, 0.625])])
    report = bench.compare_calls(ref, cand, "llm-a")
    # 6 + 2 calls in each; shared: q1, q2, t1, t2, t3, j1 and the attention call; t3 cannot be aligned
    assert report["calls"] == {"reference": 8, "candidate": 8, "shared": 7, "unaligned": 1}
    assert report["generate_equal"] == {
        "answer_candidates": {"equal": 1, "shared": 2},
        "judge": {"equal": 1, "shared": 1},
    }
    assert report["generate_equal_all"] == {"equal": 2, "shared": 3}
    # |deltas| of t1 and t2: 0.5, 0, 1, 0.25 -> sorted 0, 0.25, 0.5, 1: median 0.375, p95 at rank 2.85
    assert report["score_abs_delta_logprob"] == pytest.approx(
        {"n": 4, "mean": 0.4375, "median": 0.375, "p95": 0.5 + 0.85 * 0.5, "max": 1.0}
    )
    assert report["attention_abs_delta_mass"] == pytest.approx(
        {"n": 2, "mean": 0.125, "median": 0.125, "p95": 0.125, "max": 0.125}
    )


def test_compare_table_counts_headline_and_all_numeric_cells_that_differ(tmp_path):
    for name, correct, n in (("float32", [50.0, 20.0, None], [10, 10, 10]), ("int8", [50.0, 27.5, 5.0], [10, 9, 10])):
        (tmp_path / name / "results" / "tables").mkdir(parents=True)
        pl.DataFrame({"llm": ["a", "b", "c"], "correct": correct, "n": n}).write_csv(
            tmp_path / name / "results" / "tables" / "table1_rag.csv"
        )
    report = bench.compare_table(tmp_path / "float32", tmp_path / "int8", "Table 1")
    # correct: row b moved by 7.5, row c went from empty to 5; n: row b
    assert report == {"cells": 6, "differ": 3, "headline_cells": 3, "headline_differ": 2, "headline_max_delta": 7.5}
    assert bench.compare_table(tmp_path / "float32", tmp_path / "int8", "Table 2")["cells"] is None


def test_compare_gold_counts_pairs_identical_queries_and_known_flags(tmp_path):
    ref, cand = tmp_path / "float32", tmp_path / "int8"
    write_gold(
        ref, "d", "llm-a",
        gold_C={"q1": ["p1", "p2"], "q2": ["p3"]},
        gold_U={"q1": ["p1", "p2"], "q2": ["p3"], "q4": ["p9"]},
        known={"q1": True, "q2": False, "q3": False, "q4": False},
    )  # fmt: skip
    write_gold(
        cand, "d", "llm-a",
        gold_C={"q1": ["p1"], "q2": ["p3"], "q3": ["p4"]},
        gold_U={"q1": ["p2", "p1"], "q2": ["p3"], "q4": ["p9"]},
        known={"q1": True, "q2": True, "q3": False},  # no flag for q4
    )  # fmt: skip
    write_gold(ref, "d", "llm-b", gold_C={"q1": ["p1"]})
    report = bench.compare_gold(ref, cand)
    assert report["d/llm-a"]["gold_C"] == {
        "both": 2,  # (q1, p1), (q2, p3)
        "only_reference": 1,  # (q1, p2)
        "only_candidate": 1,  # (q3, p4)
        "queries": 4,
        "queries_identical": 2,  # q2, and q4 with no gold passage in either
    }
    assert report["d/llm-a"]["gold_U"] == {
        "both": 4, "only_reference": 0, "only_candidate": 0, "queries": 4, "queries_identical": 4,
    }  # fmt: skip
    assert report["d/llm-a"]["known"] == {"queries": 4, "differ": 2, "qids": ["q2", "q4"]}
    assert report["d/llm-b"] == {"note": "written by the reference only"}


def test_compare_gold_names_a_file_without_its_columns(tmp_path):
    folder = tmp_path / "float32" / "results" / "d" / "llm-a"
    folder.mkdir(parents=True)
    pl.DataFrame({"qid": ["q1"], "passage": ["p1"]}).write_parquet(folder / "gold_C.parquet")
    with pytest.raises(SystemExit, match=r"gold_C\.parquet: no column pid"):
        bench.compare_gold(tmp_path / "float32", tmp_path / "int8")


def test_compare_findings_lists_the_verdicts_and_cell_verdicts_that_differ(tmp_path):
    def finding(finding_id, verdict, effect, cells):
        return {"id": finding_id, "verdict": verdict, "effect": effect, "cells": cells}

    def cell(dataset, llm, verdict, effect, **naming):
        return {"dataset": dataset, "llm": llm, "verdict": verdict, "effect": effect, "note": "", **naming}

    ref, cand = tmp_path / "float32", tmp_path / "int8"
    write_findings(ref, [
        finding("f1", "holds", 20.0, [cell("d", "a", "holds", 20.0), cell("d", "b", "holds", 30.0)]),
        finding("f2", "inconclusive", 5.0, [
            cell("d", "a", "inconclusive", 5.0, gold_from="b"),
            cell("d", "b", "inconclusive", 5.0, gold_from="a"),
        ]),
        finding("f3", "not run", None, []),
        finding("f4", "holds", 1.0, []),  # only the reference reports it
    ])  # fmt: skip
    write_findings(cand, [
        finding("f1", "inconclusive", 20.0, [cell("d", "a", "holds", 20.0), cell("d", "b", "inconclusive", 10.0)]),
        finding("f2", "inconclusive", 7.5, [
            cell("d", "b", "holds", 5.0, gold_from="a"),  # the cells' order does not matter, their names do
            cell("d", "a", "inconclusive", 10.0, gold_from="b"),
        ]),
        finding("f3", "not run", None, []),
    ])  # fmt: skip
    report = bench.compare_findings(ref, cand)
    assert report["findings"] == 3 and report["only_reference"] == ["f4"] and report["only_candidate"] == []
    assert report["verdicts_differ"] == [{"id": "f1", "reference": "holds", "candidate": "inconclusive"}]
    assert report["effects_differ"] == 1  # f2's 5.0 -> 7.5 (f3's effect is None in both)
    assert report["cells"] == 4
    assert report["cell_verdicts_differ"] == [
        {"id": "f1", "cell": "d/b", "reference": "holds", "candidate": "inconclusive"},
        {"id": "f2", "cell": "d/b/a", "reference": "inconclusive", "candidate": "holds"},
    ]
    assert report["cell_effects_differ"] == 2  # f1 d/b 30 -> 10, f2 d/a/b 5 -> 10
    assert bench.compare_findings(ref, tmp_path / "elsewhere")["findings"] is None


def test_cells_with_the_same_name_are_kept_apart_by_rank():
    cells = [{"dataset": "d", "llm": "a", "verdict": "holds"}, {"dataset": "d", "llm": "a", "verdict": "reversed"}]
    assert {k: c["verdict"] for k, c in bench._named_cells({"cells": cells}).items()} == {
        "d/a": "holds",
        "d/a #2": "reversed",
    }


def test_the_machine_and_the_runs_are_read_from_their_files(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC 9R14\nflags\t\t: fpu avx512_bf16\n\nprocessor\t: 1\nmodel name\t: other\n"
    )
    assert bench.cpu_model(cpuinfo) == {"family": "25", "model": "17", "name": "AMD EPYC 9R14"}
    logs = tmp_path / ".snakemake" / "log"
    logs.mkdir(parents=True)
    (logs / "2026-12-05T010000.000000.snakemake.log").write_text(
        "111 of 111 steps (100%) done\nElapsed time: 0:14:39.5\n"
    )
    (logs / "2026-12-05T020000.000000.snakemake.log").write_text("3 of 5 steps (60%) done\n")  # stopped: not its wall
    assert bench.logged_wall(tmp_path) == {
        "seconds": 879.5,
        "steps": 111,
        "log": str(logs / "2026-12-05T010000.000000.snakemake.log"),
    }
    (tmp_path / "results" / "tables").mkdir(parents=True)
    (tmp_path / "results" / "tables" / "cost.csv").write_text(
        "rule,llm,dtype,calls_made\nmaterialize_model,a,,0\nanswer_candidates,a,int8,3\njudge,a,int8,2\n"
        "answer_candidates,b,bfloat16,3\njudge,b,float32,1\n"
    )
    assert bench.arithmetic(tmp_path) == {"a": "int8", "b": "bfloat16+float32"}


def test_candidate_dirs_take_a_name_or_a_single_candidate():
    assert bench.candidate_dirs(["int8=/x/y", "auto=/z=w"], ["int8", "auto"]) == {
        "int8": Path("/x/y"),
        "auto": Path("/z=w"),
    }
    assert bench.candidate_dirs(["/runs/a=b"], ["int8"]) == {"int8": Path("/runs/a=b")}
    with pytest.raises(SystemExit, match="NAME=DIR with NAME one of int8, auto"):
        bench.candidate_dirs(["/runs/int8"], ["int8", "auto"])
