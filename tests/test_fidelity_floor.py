"""benchmarks/fidelity_floor.py's rules, fast: the floor's verdict, the deterministic draw of calls
from a generation store, the statistics it reports, and the cut its direct greedy outputs take. Its
run on a model: tests/test_benchmarks_scripts.py."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
try:
    import fidelity_floor as ff
finally:
    sys.path.remove(str(REPO / "benchmarks"))


def _row(equal: int, score: float | None, continuation: float | None, calls: int = 48) -> dict:
    return {
        "generate_calls": calls,
        "greedy_equal": equal,
        "score": {"median": score},
        "continuation": {"median": continuation},
    }


ANCHOR = _row(44, 0.020, 0.010)


@pytest.mark.parametrize(
    ("candidate", "meets", "failing"),
    [
        (_row(44, 0.020, 0.010), True, []),  # the anchor's own numbers
        (_row(48, 0.001, 0.001), True, []),  # closer to float32 than bfloat16
        (_row(42, 0.020, 0.010), True, []),  # 2 calls fewer: within the slack
        (_row(41, 0.020, 0.010), False, ["greedy 41/48 < bfloat16's 44/48 - 2"]),
        (_row(44, 0.025, 0.0125), True, []),  # both medians at exactly 1.25x
        (_row(44, 0.0251, 0.010), False, ["score median"]),
        (_row(44, 0.020, 0.0126), False, ["continuation median"]),
        (_row(30, 0.09, 0.02), False, ["greedy", "score median", "continuation median"]),  # int8 as measured
        (_row(44, None, 0.010), True, []),  # no score calls: that median is not compared
    ],
)
def test_floor_verdict_is_greedy_within_slack_calls_and_each_median_within_slack(candidate, meets, failing):
    got, reasons = ff.floor_verdict(candidate, ANCHOR, slack_calls=2, slack_median=0.25)
    assert got is meets
    assert len(reasons) == len(failing)
    for reason, expected in zip(reasons, failing):
        assert reason.startswith(expected)


def test_floor_verdict_takes_its_slacks_from_the_arguments():
    candidate = _row(43, 0.021, 0.010)
    assert ff.floor_verdict(candidate, ANCHOR, slack_calls=1, slack_median=0.25)[0]
    assert not ff.floor_verdict(candidate, ANCHOR, slack_calls=0, slack_median=0.25)[0]
    assert not ff.floor_verdict(candidate, ANCHOR, slack_calls=1, slack_median=0.0)[0]


def _shard(path: Path, rows: list[tuple[str, str, str, dict]]) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE calls (kind TEXT, prompt TEXT, target TEXT, params TEXT, value TEXT)")
        db.executemany(
            "INSERT INTO calls VALUES (?, ?, ?, ?, '')", [(k, p, t, json.dumps(params)) for k, p, t, params in rows]
        )


def _store(folder: Path) -> Path:
    folder.mkdir(parents=True)
    limits = {"max_new_tokens": 24, "stop": ["\n"], "dtype": "int8"}
    _shard(
        folder / "answer_candidates+dataset=d+llm=m.20261205T000000-aaaaaaaaaaaa.sqlite",
        [("generate", f"candidate {i}", "", limits) for i in range(5)],
    )
    _shard(
        folder / "answer_run+dataset=d+llm=m+run=bm25.20261205T000000-bbbbbbbbbbbb.sqlite",
        [("generate", "run 0", "", limits), ("generate", "candidate 0", "", {**limits, "dtype": "bfloat16"})],
    )
    _shard(
        folder / "judge+dataset=d+llm=m.20261205T000000-cccccccccccc.sqlite",
        [("generate", f"judge {i}", "", {"max_new_tokens": 8 if i % 2 else 64, "stop": ["\n"]}) for i in range(3)]
        + [("score", "", f"passage {i}", {}) for i in range(4)]
        + [("score", f"question {i}", f" answer {i}", {}) for i in range(2)]
        + [("attention", "attended", "", {})],
    )
    # a shard still being written is not read
    open_shard = folder / "answer_gold+dataset=d+llm=m.20261205T000000-dddddddddddd.open.sqlite"
    _shard(open_shard, [("generate", "x", "", limits)])
    return folder


def test_calls_are_drawn_from_finished_shards_stratified_in_sha256_order(tmp_path):
    store = _store(tmp_path / "m")
    calls = ff.read_store(store)
    # the same prompt with the same limits in two shards (two arithmetics' runs) counts once
    assert sum(c.prompt == "candidate 0" for c in calls) == 1
    assert {c.stage for c in calls} == {"answer_candidates", "answer_run", "judge"}
    assert {(c.prompt, c.max_new_tokens, c.stop) for c in calls if c.stage == "judge" and c.kind == "generate"} == {
        ("judge 0", 64, ("\n",)),
        ("judge 1", 8, ("\n",)),
        ("judge 2", 64, ("\n",)),
    }
    generations, scores = ff.draw_calls(calls, 6, 5)
    by_sha = lambda prompts: sorted(prompts, key=lambda p: ff.sha256(p))  # noqa: E731
    candidates, judges = by_sha([f"candidate {i}" for i in range(5)]), by_sha([f"judge {i}" for i in range(3)])
    # rounds over the stages in name order; answer_run's one call leaves its later turns to the others
    expected = [candidates[0], "run 0", judges[0], candidates[1], judges[1], candidates[2]]
    assert [c.prompt for c in generations] == expected
    passages = sorted([f"passage {i}" for i in range(4)], key=lambda t: ff.sha256("", t))
    questions = sorted([(f"question {i}", f" answer {i}") for i in range(2)], key=lambda pt: ff.sha256(*pt))
    assert [(c.prompt, c.target) for c in scores] == [
        questions[0],
        ("", passages[0]),
        questions[1],
        ("", passages[1]),
        ("", passages[2]),
    ]
    assert ff.draw_calls(list(reversed(calls)), 6, 5) == (generations, scores)  # whatever the reading order


def test_a_store_without_shards_or_with_a_bad_row_names_the_file(tmp_path):
    with pytest.raises(SystemExit, match=str(tmp_path)):
        ff.read_store(tmp_path)
    shard = tmp_path / "judge+dataset=d.20261205T000000-aaaaaaaaaaaa.sqlite"
    _shard(shard, [("generate", "p", "", {"stop": ["\n"]})])
    with pytest.raises(SystemExit, match=r"judge\+dataset=d.*no max_new_tokens"):
        ff.read_store(tmp_path)


def test_summary_is_the_median_and_numpys_linear_95th_percentile():
    rng = np.random.default_rng(0)
    for n in (1, 2, 19, 20, 101):
        values = rng.exponential(size=n).tolist()
        got = ff.summary(values)
        assert got["tokens"] == n and got["max"] == max(values)
        assert got["median"] == pytest.approx(np.median(values))
        assert got["p95"] == pytest.approx(np.percentile(values, 95))
    assert ff.summary([]) == {"tokens": 0, "median": None, "p95": None, "max": None}


def test_abs_deltas_refuse_calls_scored_on_different_tokens():
    assert ff.abs_deltas([[-1.0, -2.0], []], [[-1.5, -1.0], []]) == [0.5, 1.0]
    with pytest.raises(RuntimeError, match="call 1: 2 tokens"):
        ff.abs_deltas([[-1.0], [-1.0, -2.0]], [[-1.0], [-1.0]])


@pytest.mark.parametrize(
    "text", ["\nLima\nPeru", "  Lima is the capital.\n\nMore", "", "\n\n", "Lima", "Lima, Peru \n", " a\nb\nc"]
)
def test_the_direct_outputs_are_cut_as_the_project_cuts(text):
    from llm_utility.generation.generator import cut_answer

    for stop in (["\n"], [], ["\n", "."], [""]):
        assert ff.cut(text, stop) == cut_answer(text, stop)


def test_the_csv_refuses_a_file_with_other_columns(tmp_path):
    path = tmp_path / "fidelity_floor.csv"
    path.write_text("date,llm\n2026-01-01,m\n")
    with pytest.raises(SystemExit, match=f"{path}: its header"):
        ff.append_csv(path, {"models": []})
