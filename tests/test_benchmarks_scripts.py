"""Every benchmark script in benchmarks/ still runs, at a tiny size (slow tier: each starts its own
processes). Benchmarks measure and assert nothing themselves; here each run must exit cleanly and
print what it promises, with results that can be checked at that size.

benchmarks/demo_pipeline.py is the exception: it is the whole demo from a clean results/ of this
checkout (13 minutes here), which tests/test_workflow_e2e.py covers on a tiny config.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# Not part of `make test` (which must fit in 15 minutes on 2 cores): `make test-benchmarks`.
pytestmark = [pytest.mark.slow, pytest.mark.benchmarks]

REPO = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str, timeout: int = 600) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p),
    }
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, f"{script} failed:\n{out.stderr[-4000:]}"
    return out.stdout


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_gpu_check_runs_its_cpu_rows_and_skips_cuda_without_a_gpu(tmp_path):
    import torch

    out = _run("gpu_check.py", "--prefill-batch", "2", "--prefill-tokens", "64", "--json", str(tmp_path / "r.json"))
    result = json.loads((tmp_path / "r.json").read_text())
    cpu = result["cpu"]
    assert cpu["device"] == "cpu" and cpu["dtype"] == "float32"
    # fp32 on the CPU: a left-padded batch decodes exactly what each prompt does alone.
    assert cpu["generate"] == cpu["generate_one_at_a_time"] and len(cpu["generate"]) == 4
    assert all(math.isfinite(v) and v <= 0 for row in cpu["score"] for v in row)
    assert all(sum(masses) == pytest.approx(1.0) for masses in cpu["attention"])
    assert cpu["closed"] and cpu["prefill_tokens_per_s"] > 0 and cpu["encode_passages_per_s"] > 0
    assert all(len(v) == 128 for v in cpu["encode"])  # the tiny BERT's width
    table = [line for line in out.splitlines() if line.startswith("| ")][1:]  # past the header
    assert len(table) == 8
    if not torch.cuda.is_available():
        assert result["cuda"] is None
        assert all("skipped (no CUDA device)" in row.split(" | ")[2] for row in table)


def test_scale_rehearsal_runs_the_streaming_path_flat_and_ivf():
    flat = _run("scale_rehearsal.py", "--sizes", "1000,3000", "--dim", "64", "--queries", "50", "--encode-sample", "20")
    assert "| 3,000 | data |" in flat and "| 3,000 | retrieve |" in flat
    assert "Retrieval check (a query's own passage ranked first): 1,000: 1.000, 3,000: 1.000." in flat
    ivf = _run(
        "scale_rehearsal.py",
        "--sizes",
        "1000,3000",
        "--dim",
        "64",
        "--queries",
        "50",
        "--encode-sample",
        "0",
        "--factory",
        "IVF16,SQ8",
        "--nprobe",
        "16",
        "--train-sample",
        "1000",
    )
    assert "index `IVF16,SQ8`" in ivf and "| 3,000 | index |" in ivf


def test_encode_throughput():
    [result] = _json_lines(_run("encode_throughput.py", "--n", "16", "--batch-size", "8"))
    assert result["passages"] == 16 and result["passages_per_s"] > 0


def test_findings_speed():
    [result] = _json_lines(
        _run("findings_speed.py", "--datasets", "1", "--llms", "2", "--queries", "40", "--resamples", "50")
    )
    assert result["findings_run"] > 0 and result["findings_s"] >= 0


def test_judgment_analysis_speed():
    [result] = _json_lines(_run("judgment_analysis_speed.py", "--resamples", "20"))
    assert result["parse_outputs_per_s"] > 0 and set(result["bootstrap_s"]) >= {"BCa_n100", "percentile_n3000"}


def test_prepare_corpus():
    results = {r["stage"]: r for r in _json_lines(_run("prepare_corpus.py", "--pages", "30", "--passages", "300"))}
    assert set(results) == {"kilt-chunk", "kilt-merge", "dpr-tsv", "msmarco-tsv"}
    assert results["dpr-tsv"]["passages"] == results["msmarco-tsv"]["passages"] == 300
    assert results["kilt-merge"]["passages"] == results["kilt-chunk"]["passages"] > 30


def test_prompt_tokens_counts_every_prompt_kind_with_a_model_s_tokenizer(tmp_path):
    from standin import write_tiny_model

    tokenizer = write_tiny_model(tmp_path / "tok")
    lines = _json_lines(_run("prompt_tokens.py", "--tokenizer", str(tokenizer), "--thinking"))
    *prompts, summary = lines
    counts = {p["prompt"]: p["tokens"] for p in prompts}
    assert summary["k"] == 20 and len(summary["passage_tokens"]) == 20
    # The listwise prompts hold all 20 passages plus a chat turn and an acknowledgment for each.
    assert summary["longest_prompt"] == max(counts.values()) > sum(summary["passage_tokens"])
    assert summary["longest_prompt_plus_largest_cap"] == summary["longest_prompt"] + summary["output_caps"]["thinking"]
    assert (
        counts["answer, no passage"]
        < counts["answer, one passage"]
        < counts["answer, top-20 (also the attention pass)"]
    )


def test_gpu_memory_table():
    out = _run("gpu_memory.py", "--max-model-len", "8192")
    rows = json.loads(out.strip().splitlines()[-1])
    by_model = {r["model"]: r for r in rows}
    assert set(by_model) == {"Llama-3.1-8B-Instruct", "Qwen3-8B", "Qwen3-14B", "Qwen3-32B"}
    assert by_model["Qwen3-32B"]["gpu"] == 2 and by_model["Qwen3-32B"]["parameters_B"] == pytest.approx(32.8, abs=0.1)
    # 8,192 tokens of Qwen3-32B's KV cache: 2 x 64 layers x 8 heads x 128 x 2 bytes per token.
    assert by_model["Qwen3-32B"]["kv_GiB_per_sequence"] == pytest.approx(2 * 64 * 8 * 128 * 2 * 8192 / 2**30)


def test_bm25_index_scale():
    out = _run("bm25_index_scale.py", "--passages", "2000")
    row = next(line for line in out.splitlines() if line.startswith("| 2,000 |"))
    seconds, peak_mb, per_passage = (float(x) for x in row.strip("|").split("|")[1:])
    assert seconds > 0 and peak_mb > 50 and per_passage == pytest.approx(1024 * peak_mb / 2000, rel=0.01)


def test_arithmetic_agreement_compares_a_reference_with_two_candidates(tmp_path):
    """--compare-only on three work directories written here (the reference's given by
    --reference-dir, one candidate's by --candidate-dir NAME=DIR, the other under --workdir): the
    shares, deltas, seconds, cells, gold sets and verdicts it reports are the ones these stores, logs,
    tables, gold sets and findings hold."""
    import sqlite3

    import polars as pl

    runs = {  # answers, score log-probs, a Table 1 cell, seconds per job, q1's gold passages, a verdict
        "float32": (["Lima", "Oslo"], [-1.0, -2.0], 0.5, 4.0, ["p1", "p2"], "holds"),
        "int8": (["Lima", "Bergen"], [-1.25, -2.0], 0.75, 2.0, ["p1"], "inconclusive"),
        "bfloat16": (["Lima", "Oslo"], [-1.0, -2.125], 0.5, 3.0, ["p1", "p2"], "holds"),
    }
    dirs = {"float32": tmp_path / "elsewhere", "int8": tmp_path / "int8", "bfloat16": tmp_path / "other"}
    for name, (answers, scores, cell, seconds, gold, verdict) in runs.items():
        workdir = dirs[name]
        store = workdir / "resources" / "cache" / "generation" / "llm-a"
        store.mkdir(parents=True)
        with sqlite3.connect(store / "answer_candidates+dataset=d+llm=llm-a.sqlite") as db:
            db.execute("CREATE TABLE calls (kind TEXT, prompt TEXT, target TEXT, value TEXT)")
            db.executemany(
                "INSERT INTO calls VALUES (?, ?, ?, ?)",
                [
                    ("generate", "q1", "", answers[0]),
                    ("generate", "q2", "", answers[1]),
                    ("score", "", "t", json.dumps(scores)),
                ],
            )
        (workdir / "logs").mkdir()
        lines = []
        # an older revision's rule name (answer_gold_U) counts as answer_gold
        for job in ("answer_candidates+dataset=d+llm=llm-a", "answer_gold_U+dataset=d+llm=llm-a"):
            calls = {"generate": {"seconds": seconds, "made": 2, "served": 1}}
            lines.append(f"INFO store_stats {json.dumps({'llm': 'llm-a', 'job': job, 'calls': calls})}")
        (workdir / "logs" / "job.log").write_text("\n".join(lines) + "\n")
        tables = workdir / "results" / "tables"
        tables.mkdir(parents=True)
        pl.DataFrame({"llm": ["llm-a", "llm-b"], "correct": [cell, 0.25], "n": [10, 10]}).write_csv(
            tables / "table1_rag.csv"
        )
        (tables / "cost.csv").write_text(f"rule,llm,dtype\nanswer_candidates,llm-a,{name}\n")
        folder = workdir / "results" / "d" / "llm-a"
        folder.mkdir(parents=True)
        for gold_set in ("gold_C", "gold_U"):
            pl.DataFrame({"qid": ["q1"] * len(gold), "pid": gold}).write_parquet(folder / f"{gold_set}.parquet")
        pl.DataFrame({"qid": ["q1", "q2"], "known": [False, False]}).write_parquet(folder / "known.parquet")
        findings = [{"id": "f1", "verdict": verdict, "effect": 1.0, "cells": []}]
        (workdir / "results" / "findings.json").write_text(json.dumps({"findings": findings}))
    report_path = tmp_path / "report.json"
    out = _run(
        "arithmetic_agreement.py",
        "--workdir",
        str(tmp_path),
        "--reference-dir",
        str(dirs["float32"]),
        "--candidates",
        "int8",
        "bfloat16",
        "--candidate-dir",
        f"bfloat16={dirs['bfloat16']}",
        "--compare-only",
        "--json",
        str(report_path),
    )
    assert "| llm-a | answer_candidates | 1/2 (50%) | 2/2 (100%) |" in out
    assert "| answer_gold | 4 | 2 (0.50) | 3 (0.75) |" in out
    # |delta log-prob| of int8: 0.25 and 0; of bfloat16: 0 and 0.125 (median, p95, max)
    assert "| 0.125 / 0.237 / 0.25 (2) | 0.0625 / 0.119 / 0.125 (2) |" in out
    assert "| Table 1 (correct) | 1 of 2, 0.2; 1 of 4 | 0 of 2, 0.0; 0 of 4 |" in out
    # q1's gold: {p1, p2} against {p1}; q2 has none in any run
    assert "| d/llm-a | gold_C | 1 / 1 / 0; 1 of 2 | 2 / 0 / 0; 2 of 2 |" in out
    assert "| f1 | holds | **inconclusive** | = |" in out
    report = json.loads(report_path.read_text())
    assert report["reference"] == "float32" and list(report["candidates"]) == ["int8", "bfloat16"]
    assert report["runs"]["bfloat16"]["dir"] == str(dirs["bfloat16"])
    assert report["runs"]["int8"]["arithmetic"] == {"llm-a": "int8"}
    assert report["runs"]["float32"]["calls"] == {"llm-a": {"seconds": 8.0, "made": 4, "served": 2}}
    assert report["runs"]["float32"]["stage_seconds"] == {"answer_candidates": 4.0, "answer_gold": 4.0}
    int8, bf16 = report["comparisons"]["int8"], report["comparisons"]["bfloat16"]
    assert int8["llms"]["llm-a"]["score_abs_delta_logprob"]["mean"] == 0.125
    assert int8["llms"]["llm-a"]["generate_equal_all"] == {"equal": 1, "shared": 2}
    table1 = int8["tables"]["Table 1"]
    assert (table1["cells"], table1["differ"]) == (4, 1)  # the numeric cells: correct and n
    assert (table1["headline_cells"], table1["headline_differ"], table1["headline_max_delta"]) == (2, 1, 0.25)
    assert int8["tables"]["Table 2"]["cells"] is None  # written by no run
    assert int8["gold"]["d/llm-a"]["gold_U"]["only_reference"] == 1 and bf16["gold"]["d/llm-a"]["known"]["differ"] == 0
    assert int8["findings"]["verdicts_differ"] == [{"id": "f1", "reference": "holds", "candidate": "inconclusive"}]
    assert bf16["findings"]["verdicts_differ"] == []
    assert report["commit"] and report["flags"] is not None and report["date"]


def test_arithmetic_agreement_runs_another_revision_from_its_own_worktree(tmp_path):
    """--reference-rev: the reference's Snakefile, config, prompts and library come from a git
    worktree of that revision, which materializes its own models."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import arithmetic_agreement as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    tree = bench.source_tree(tmp_path, "HEAD")
    try:
        assert (tree / "Snakefile").is_file() and tree != REPO
        assert bench.source_tree(tmp_path, "HEAD") == tree  # made once
        config = bench.prepare(tmp_path / "float32@HEAD", "float32", tree)
        cfg = yaml.safe_load(config.read_text())
        assert {spec["dtype"] for spec in cfg["llms"].values()} == {"float32"}
        assert all(Path(p).is_file() and Path(p).is_relative_to(tree) for p in cfg["prompts"])
        assert not (tmp_path / "float32@HEAD" / "resources" / "models").exists()
        # this checkout's own runs share its models
        bench.prepare(tmp_path / "auto", "auto")
        assert (tmp_path / "auto" / "resources" / "models").resolve() == (REPO / "resources" / "models").resolve()
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True)


def test_backend_agreement_compares_two_runs_call_for_call_and_file_for_file(tmp_path):
    """--compare-only on a reference and a candidate written here: the shares, deltas and cells it
    reports are the ones these stores and results hold, and the overlay's merge removes null entries."""
    import sqlite3

    import polars as pl

    runs = {
        "reference": (["SUPPORTS", "REFUTES"], [-1.0], 0.5, ["a", "b"]),
        "candidate": (["SUPPORTS", "true"], [-1.5], 0.5, ["a", "c"]),
    }
    for name, (answers, scores, cell, outputs) in runs.items():
        workdir = tmp_path / name
        store = workdir / "resources" / "cache" / "generation" / "smollm2-135m"
        store.mkdir(parents=True)
        with sqlite3.connect(store / "judge+dataset=d+llm=smollm2-135m.sqlite") as db:
            db.execute("CREATE TABLE calls (kind TEXT, prompt TEXT, target TEXT, value TEXT)")
            db.executemany(
                "INSERT INTO calls VALUES (?, ?, ?, ?)",
                [
                    ("generate", "q1", "", answers[0]),
                    ("generate", "q2", "", answers[1]),
                    ("score", "p", "t", json.dumps(scores)),
                ],
            )
        (workdir / "logs").mkdir()
        stats = {"llm": "smollm2-135m", "calls": {"generate": {"seconds": 3.0 if name == "reference" else 6.0}}}
        (workdir / "logs" / "job.log").write_text(f"store_stats {json.dumps(stats)}\n")
        (workdir / "results" / "tables").mkdir(parents=True)
        (workdir / "results" / "d").mkdir()
        pl.DataFrame({"llm": ["smollm2-135m"], "acc": [cell]}).write_csv(
            workdir / "results" / "tables" / "table1_rag.csv"
        )
        pl.DataFrame({"qid": ["q1", "q2"], "output": outputs}).write_parquet(workdir / "results" / "d" / "none.parquet")
    report_path = tmp_path / "report.json"
    out = _run("backend_agreement.py", "--workdir", str(tmp_path), "--compare-only", "--json", str(report_path))
    assert "| smollm2-135m | judge | 1/2 (50%) |" in out
    assert "| tables/table1_rag.csv | 0 of 2 |" in out and "differs: d/none.parquet (1)" in out
    report = json.loads(report_path.read_text())
    assert report["call_seconds"] == {"reference": {"smollm2-135m": 3.0}, "candidate": {"smollm2-135m": 6.0}}
    assert report["llms"]["smollm2-135m"]["score_abs_delta_logprob"] == {
        "n": 1,
        "mean": 0.5,
        "median": 0.5,
        "p95": 0.5,
        "max": 0.5,
    }
    assert report["differences"]["smollm2-135m"][0]["candidate"] == "true"
    # The overlay as Snakemake merges it: config/vllm-cpu.yaml keeps one dataset, both LLMs on vLLM.
    sys.path.insert(0, str(REPO / "benchmarks"))
    import backend_agreement

    cfgs = backend_agreement.configs(REPO / "config" / "config.yaml", REPO / "config" / "vllm-cpu.yaml")
    assert list(cfgs["candidate"]["datasets"]) == list(cfgs["reference"]["datasets"]) == ["wf-claims"]
    for llm, spec in cfgs["candidate"]["llms"].items():
        ref = cfgs["reference"]["llms"][llm]
        assert (spec["backend"], spec["gpu"], spec["dtype"]) == ("vllm", 0, "float32")
        assert (ref["backend"], ref["dtype"], "python" in ref) == ("transformers", "float32", False)


def test_fidelity_floor_measures_each_arithmetic_against_direct_float32(tmp_path):
    """On a tiny random Llama and a store written here: the direct float32 outputs are plain
    transformers' greedy ones (``model.generate``, cut written out here), the project's float32 gives
    them too, plain bfloat16's distance on the score calls is the one recomputed here, every verdict
    follows the floor's rule, and the CSV gets one row per arithmetic."""
    import csv
    import hashlib
    import sqlite3

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llm_utility.generation.cpu_arithmetic import int8_supported
    from test_independent_checks import tiny_spec, write_tiny_llama

    folder = tmp_path / "models" / "tiny-bos"
    write_tiny_llama(folder, "bos", seed=1)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"llms": {"tiny-bos": tiny_spec(folder)}}))
    store = tmp_path / "store" / "tiny-bos"
    store.mkdir(parents=True)
    answers = [
        "Information: Lima is the capital of Peru. Question: What is the capital of Peru? Answer:",
        "Question: What is the capital of Chile? Answer:",
        "Information: Oslo lies on the coast of Norway. Question: Where is Oslo? Answer:",
    ]
    judged = ["Santiago Chile [1] [2] > Answer:", "Question: Is Lima the capital of Peru? Answer:"]
    scored = [("", "Lima is the capital of Peru."), ("Question: What is the capital of Chile? Answer:", " Santiago")]
    shards = {
        "answer_candidates+dataset=d+llm=tiny-bos.20261205T000000-aaaaaaaaaaaa.sqlite": [
            ("generate", p, "", {"max_new_tokens": 12, "stop": ["\n"]}) for p in answers
        ],
        "judge+dataset=d+llm=tiny-bos.20261205T000000-bbbbbbbbbbbb.sqlite": [
            ("generate", p, "", {"max_new_tokens": 6, "stop": ["\n"]}) for p in judged
        ]
        + [("score", p, t, {}) for p, t in scored],
    }
    for name, rows in shards.items():
        with sqlite3.connect(store / name) as db:
            db.execute("CREATE TABLE calls (kind TEXT, prompt TEXT, target TEXT, params TEXT, value TEXT)")
            db.executemany("INSERT INTO calls VALUES (?, ?, ?, ?, '')", [(*r[:3], json.dumps(r[3])) for r in rows])
    report_path, table = tmp_path / "report.json", tmp_path / "results" / "fidelity_floor.csv"
    args = ["--models", "tiny-bos", "--generate", "4", "--score", "2", "--store", str(tmp_path / "store")]
    args += ["--models-dir", str(tmp_path / "models"), "--config", str(config), "--csv", str(table)]
    out = _run("fidelity_floor.py", *args, "--json", str(report_path))
    report = json.loads(report_path.read_text())
    (model,) = report["models"]
    rows = {r["arithmetic"]: r for r in model["rows"]}
    project = ["float32", "bfloat16", *(["int8"] if int8_supported() else [])]
    assert list(rows) == ["direct float32", "direct bfloat16", *(f"project {d}" for d in project)]
    assert "| tiny-bos | project float32 | 4/4 (100%) |" in out

    plain = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    prompts = {hashlib.sha256(p.encode()).hexdigest(): p for p in answers + judged}
    # rounds over the stages: answer_candidates, judge, answer_candidates, judge
    assert [c["max_new_tokens"] for c in model["calls"]] == [12, 6, 12, 6]
    for call in model["calls"]:
        ids = torch.tensor([tokenizer(prompts[call["prompt_sha256"]])["input_ids"]])
        with torch.inference_mode():
            new = plain.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=call["max_new_tokens"],
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )[0, ids.shape[1] :]
        expected = tokenizer.decode(new, skip_special_tokens=True).lstrip().split("\n")[0].strip()
        assert call["outputs"]["direct float32"] == call["outputs"]["project float32"] == expected
    reference, engine = rows["direct float32"], rows["project float32"]
    assert (reference["greedy_equal"], reference["score"]["max"], reference["continuation"]["max"]) == (4, 0.0, 0.0)
    assert engine["score"]["max"] < 1e-4 and engine["continuation"]["max"] < 1e-4

    # plain bfloat16's distance on the score calls, recomputed: full logits, log-softmax, gather
    def logprobs(m, prompt, target):
        prompt_ids = tokenizer(prompt)["input_ids"]  # <s> first, also for the empty prompt
        ids = prompt_ids + tokenizer(target, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            table = torch.log_softmax(m(torch.tensor([ids])).logits[0].float(), dim=-1)
        return [float(table[j - 1, ids[j]]) for j in range(len(prompt_ids), len(ids))]

    f32 = [logprobs(plain, p, t) for p, t in scored]
    bf16 = [logprobs(plain.to(torch.bfloat16), p, t) for p, t in scored]
    deltas = sorted(abs(a - b) for x, y in zip(f32, bf16) for a, b in zip(x, y))
    anchor = rows["direct bfloat16"]
    assert anchor["score"]["tokens"] == len(deltas) > 2  # the passage's tokens after <s>, the answer's
    assert anchor["score"]["max"] == pytest.approx(deltas[-1], abs=1e-6)
    middle = (deltas[(len(deltas) - 1) // 2] + deltas[len(deltas) // 2]) / 2
    assert anchor["score"]["median"] == pytest.approx(middle, abs=1e-6)

    for name in (f"project {d}" for d in project):
        r = rows[name]
        meets = r["greedy_equal"] >= anchor["greedy_equal"] - 2 and all(
            r[part]["median"] <= anchor[part]["median"] * 1.25 for part in ("score", "continuation")
        )
        assert r["verdict"].startswith("meets the floor" if meets else "below the floor: ")
    with table.open(newline="") as f:
        written = list(csv.DictReader(f))
    assert [r["arithmetic"] for r in written] == list(rows)
    assert all(r["llm"] == "tiny-bos" and "--generate 4" in r["command"] and r["date"] for r in written)
    if not int8_supported():
        return
    # As on an AVX2-only CPU: run again with torch's kernels capped, rows appended to the same CSV.
    _run("fidelity_floor.py", *args, "--dtypes", "int8", "--emulate", "avx2", "--json", str(report_path))
    report = json.loads(report_path.read_text())
    assert report["emulate"] == "avx2" and not {"avx512f", "amx_bf16"} & set(report["flags"].split())
    arithmetics = [r["arithmetic"] for r in report["models"][0]["rows"]]
    assert arithmetics == ["direct float32", "direct bfloat16", "project int8"]
    with table.open(newline="") as f:
        written = list(csv.DictReader(f))
    assert [r["kernels"] for r in written] == [""] * len(rows) + ["AVX2"] * 3
