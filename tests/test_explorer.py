"""The explorer: one row per (query, passage of U) with each LLM's answers and the passage's marks."""

from __future__ import annotations

import re
import shutil
import subprocess

import polars as pl
import pytest

from llm_utility.report.explorer import explorer_display, explorer_html, explorer_table
from llm_utility.schemas import CANDIDATES_SCHEMA

LLMS = ["small", "big"]


def _frames():
    candidates = pl.DataFrame(
        [
            ("q1", "p1", 1, True, False, "Paris", "Paris is the capital of France."),
            ("q1", "p2", 2, True, True, "France", "France is in Europe."),
            ("q1", "p9", None, False, True, "Hobbit", "Tolkien wrote it."),
            ("q2", "p3", 1, True, True, "Tuvalu", "Funafuti is the capital of Tuvalu."),
            ("q3", "p4", 1, True, False, "Skipped", "Beyond max_queries."),
        ],
        schema=CANDIDATES_SCHEMA,
        orient="row",
    )
    queries = pl.DataFrame(
        {
            "qid": ["q2", "q1", "q3"],
            "question": ["Capital of Tuvalu?", "Capital of France?", "x"],
            "answers": [["Funafuti"], ["Paris"], ["y"]],
        }
    )

    def answers(none_ok: dict, single: list[tuple]):
        return {
            "none": pl.DataFrame(
                {
                    "qid": list(none_ok),
                    "pids": [[]] * len(none_ok),
                    "output": [f"none-{q}" for q in none_ok],
                    "correct": list(none_ok.values()),
                }
            ),
            "single": pl.DataFrame(
                [(q, [p], f"with-{p}", ok) for q, p, ok in single],
                schema={"qid": pl.String, "pids": pl.List(pl.String), "output": pl.String, "correct": pl.Boolean},
                orient="row",
            ),
        }

    all_pairs = [("q1", "p1"), ("q1", "p2"), ("q1", "p9"), ("q2", "p3"), ("q3", "p4")]
    answers_by_llm = {
        # small knows nothing; p1 and p3 help it.
        "small": answers({"q1": False, "q2": False, "q3": False}, [(q, p, p in ("p1", "p3")) for q, p in all_pairs]),
        # big knows France already; p3 helps it too.
        "big": answers({"q1": True, "q2": False, "q3": False}, [(q, p, p in ("p1", "p3")) for q, p in all_pairs]),
    }
    gold = {
        ("small", "C"): pl.DataFrame({"qid": ["q1", "q2"], "pid": ["p1", "p3"]}),
        ("small", "U"): pl.DataFrame({"qid": ["q1", "q2"], "pid": ["p1", "p3"]}),
        ("big", "C"): pl.DataFrame({"qid": ["q2"], "pid": ["p3"]}),
        ("big", "U"): pl.DataFrame({"qid": ["q2"], "pid": ["p3"]}),
    }
    judgments = {
        ("small", "pointwise"): pl.DataFrame(
            {
                "qid": ["q1", "q1"],
                "pid": ["p1", "p2"],
                "selected": [True, False],
                "parsed": [True, True],
                "echo": [False, False],
                "output": ["Yes", "No"],
            }
        ),
        ("small", "listwise_pa"): pl.DataFrame(
            {"qid": ["q1"], "pid": ["p1"], "selected": [True], "parsed": [True], "echo": [False], "output": ["[1]"]}
        ),
    }
    rankings = {
        ("big", "likelihood"): pl.DataFrame(
            {
                "qid": ["q1", "q1"],
                "pid": ["p1", "p2"],
                "rank": [2, 1],
                "score": [0.1, 0.2],
                "parsed": [True, True],
                "echo": [False, False],
            }
        )
    }
    return candidates, queries, answers_by_llm, gold, judgments, rankings


def test_one_row_per_query_and_passage_with_every_llm_s_answers_and_marks():
    table = explorer_table(*_frames(), llms=LLMS, max_queries=2)
    # The first two queries in the dataset's order (q2, then q1), passages by rank, human-only last.
    assert table.select("qid", "pid").rows() == [("q2", "p3"), ("q1", "p1"), ("q1", "p2"), ("q1", "p9")]
    row = {r["pid"]: r for r in table.iter_rows(named=True)}
    assert row["p1"]["small none"] == "none-q1" and row["p1"]["small none correct"] is False
    assert row["p1"]["big none correct"] is True  # big knows it: p1 is in no gold set of big's
    assert row["p1"]["small passage"] == "with-p1" and row["p1"]["small passage correct"] is True
    assert row["p1"]["small G(C)"] and row["p1"]["small G(U)"] and not row["p1"]["big G(U)"]
    assert row["p1"]["small selected by"] == "listwise_pa, pointwise" and row["p2"]["small selected by"] is None
    assert row["p1"]["big ranks"] == "likelihood 2" and row["p2"]["big ranks"] == "likelihood 1"
    assert row["p9"]["in_C"] is False and row["p9"]["human"] is True
    # Agreement: p1 helps small only, p3 both, p2 none.
    assert row["p1"]["agreement"] == "useful to small only" and row["p1"]["useful to"] == "small"
    assert row["p3"]["agreement"] == "useful to all" and row["p2"]["agreement"] == "useful to none"


def test_the_display_reads_as_text():
    shown = explorer_display(explorer_table(*_frames(), llms=LLMS), LLMS)
    first = dict(zip(shown.columns, shown.row(1)))  # q1, p1
    assert first["passage"] == "C #1" and first["human"] == "" and first["gold answers"] == "Paris"
    assert first["small: no passage"] == "✗ none-q1" and first["small: this passage"] == "✓ with-p1"
    assert first["big: no passage"] == "✓ none-q1"
    assert first["small: marks"] == "G(C) G(U) selected: listwise_pa, pointwise"
    assert first["big: marks"] == "ranks: likelihood 2"
    assert first["text"] == "Paris: Paris is the capital of France."
    assert shown.filter(pl.col("passage") == "U only").height == 1


def test_a_standalone_page_that_works_offline():
    pytest.importorskip("itables")
    html = explorer_html(explorer_table(*_frames(), llms=LLMS), LLMS, "wf-single: the examples behind the numbers")
    assert html.startswith("<!DOCTYPE html>") and "useful to small only" in html
    # DataTables is inlined: no script, stylesheet or module is fetched from the network.
    assert not re.search(r"""src=["']?https?:|<link[^>]*href=["']?https?:|import [^;]* from ["']https?:""", html), (
        "a network fetch"
    )
    assert "<table" in html and len(html) > 500_000  # the DataTables bundle, base64
    # The same table makes the same page, byte for byte (itables would draw a random table id).
    assert html == explorer_html(
        explorer_table(*_frames(), llms=LLMS), LLMS, "wf-single: the examples behind the numbers"
    )


def _chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.slow
def test_the_page_loads_and_searches_in_headless_chromium(tmp_path):
    """The standalone page in a real browser, offline: DataTables draws every row, the search keeps
    only the passages useful to one LLM, and a screenshot is drawn."""
    pytest.importorskip("itables")
    browser = _chromium()
    if browser is None:
        pytest.skip("no headless Chromium (apt-get install chromium)")
    table = explorer_table(*_frames(), llms=LLMS)

    def dom(name: str, **options) -> str:
        page = tmp_path / f"{name}.html"
        page.write_text(explorer_html(table, LLMS, "explorer", **options), encoding="utf-8")
        args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000"]
        subprocess.run(
            [*args, "--window-size=1600,900", f"--screenshot={tmp_path / name}.png", page.as_uri()],
            capture_output=True,
            timeout=120,
        )
        out = subprocess.run([*args, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
        return out.stdout

    def rows(text: str) -> list[str]:
        body = text[text.index("<tbody") : text.index("</tbody>")]
        return [re.sub(r"<[^>]+>", "|", r) for r in re.findall(r"<tr[ >].*?</tr>", body, re.S)]

    every = dom("every")
    assert 'class="dt-container' in every and "dt-search" in every  # DataTables ran
    assert len(rows(every)) == table.height == 5
    only = rows(dom("only", search={"search": "small only"}))
    assert len(only) == 1 and "useful to small only" in only[0] and "Capital of France?" in only[0]
    assert (tmp_path / "every.png").stat().st_size > 10_000


def test_the_job_reads_the_workflow_s_files_and_writes_the_page(tmp_path):
    pytest.importorskip("itables")
    from llm_utility.pipeline import explorer_job

    candidates, queries, answers, gold, judgments, rankings = _frames()

    def put(frame: pl.DataFrame, name: str) -> str:
        path = tmp_path / f"{name}.parquet"
        frame.write_parquet(path)
        return str(path)

    queries = queries.with_columns(pl.lit([]).cast(pl.List(pl.String)).alias("human_pids"), pl.lit("qa").alias("task"))
    html = tmp_path / "explorer" / "d.html"
    explorer_job(
        dataset="d",
        candidates=put(candidates, "candidates"),
        queries={"d": put(queries, "queries")},
        answers={
            ("d", llm, c): put(frame, f"{llm}-{c}") for llm, frames in answers.items() for c, frame in frames.items()
        },
        gold={("d", llm, c): put(frame, f"gold-{llm}-{c}") for (llm, c), frame in gold.items()},
        judgments={("d", llm, m): put(frame, f"j-{llm}-{m}") for (llm, m), frame in judgments.items()},
        rankings={("d", llm, m): put(frame, f"r-{llm}-{m}") for (llm, m), frame in rankings.items()},
        llms=LLMS,
        max_queries=1,
        html=str(html),
    )
    text = html.read_text(encoding="utf-8")
    assert "Capital of Tuvalu?" in text and "Capital of France?" not in text  # the first query only


@pytest.mark.slow
def test_the_snakemake_report_holds_the_page_unchanged(tmp_path):
    """Snakemake's report shows an HTML item in an iframe (no sandbox) of the file itself: in a
    report.zip the page as it was written, in a self-contained report.html a data: URI of the same
    bytes; so the page that works standalone (above) works in the report."""
    import base64
    import zipfile

    pytest.importorskip("itables")
    from workflow_runner import snakemake_cmd

    page = explorer_html(explorer_table(*_frames(), llms=LLMS), LLMS, "explorer")
    (tmp_path / "page.html").write_text(page, encoding="utf-8")
    (tmp_path / "cap.rst").write_text("The explorer.\n")
    (tmp_path / "Snakefile").write_text(
        'rule explorer:\n    input: "page.html"\n'
        '    output: report("explorer/d.html", caption="cap.rst", category="6 Explorer")\n'
        '    shell: "cp {input} {output}"\n'
    )
    for args in (["--cores", "1", "explorer/d.html"], ["--report", "report.zip"], ["--report", "report.html"]):
        out = subprocess.run(snakemake_cmd(*args), cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
    with zipfile.ZipFile(tmp_path / "report.zip") as z:
        (name,) = [n for n in z.namelist() if n.endswith("/d.html")]
        assert z.read(name).decode("utf-8") == page
    uri = re.search(r'"data_uri": "data:text/html;[^"]*base64,([^"]+)"', (tmp_path / "report.html").read_text())
    assert uri and base64.b64decode(uri.group(1)).decode("utf-8") == page
