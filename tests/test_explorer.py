"""The explorer: one row per (query, passage of U) with each LLM's answers and the passage's marks."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import polars as pl
import pytest

from llm_utility.report.explorer import explorer_display, explorer_html, explorer_table, judged_queries, query_heads
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


def test_a_query_past_the_judged_ones_is_marked_not_judged():
    # _frames' judgments and rankings cover q1 alone: q2 and q3 are past judgments.max_queries.
    table = explorer_table(*_frames(), llms=LLMS)
    assert dict(table.select("qid", "judged").unique().iter_rows()) == {"q1": True, "q2": False, "q3": False}
    assert judged_queries(table) == 1
    assert dict(table.select("pid", "agreement class").iter_rows()) == {
        "p1": "one",
        "p2": "none",
        "p9": "none",
        "p3": "all",
        "p4": "none",
    }
    # With no judgment nor ranking at all, no query is judged.
    candidates, queries, answers, gold, _, _ = _frames()
    assert not explorer_table(candidates, queries, answers, gold, {}, {}, LLMS)["judged"].any()


def _text(cell: str) -> str:
    """A cell as the browser shows its text: tags dropped, entities read."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", re.sub(r"<br>|</div>", " ", cell)))).strip()


def test_the_display_s_cells():
    candidates, *rest = _frames()
    candidates = candidates.with_columns(
        pl.when(pl.col("pid") == "p2").then(pl.lit("<b>bold</b> & co")).otherwise(pl.col("text")).alias("text")
    )
    table = explorer_table(candidates, *rest, llms=LLMS)
    shown = explorer_display(table, LLMS)
    assert shown.columns == [
        "query",
        "passage",
        "useful to",
        "small: with this passage",
        "big: with this passage",
        "passage text",
        "row",
        "query order",
        "useful to llms",
        "agreement class",
    ]
    row = {r["passage text"].split("</b>")[0].split("<b>")[-1]: r for r in shown.iter_rows(named=True)}
    p1, p2, p9, p3 = row["Paris"], row["France"], row["Hobbit"], row["Tuvalu"]
    assert _text(p1["query"]) == "q1 Capital of France? gold: Paris"  # what the search reads
    assert (
        _text(p1["passage"]) == "C #1"
        and _text(p2["passage"]) == "C #2 human"
        and _text(p9["passage"]) == "U only human"
    )
    assert [_text(r["useful to"]) for r in (p1, p2, p3)] == ["small only", "none", "all"]
    assert _text(p1["small: with this passage"]) == "✓ with-p1 G(C) · G(U) · selected: listwise_pa, pointwise"
    assert _text(p1["big: with this passage"]) == "✓ with-p1 ranks: likelihood 2"
    assert _text(p2["small: with this passage"]) == "✗ with-p2"  # judged, no mark
    # q2 is past the judged queries: its marks say so; its gold sets still show.
    assert _text(p3["small: with this passage"]) == "✓ with-p3 G(C) · G(U) · not judged"
    # The data is escaped: a passage's markup shows as text.
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; co" in p2["passage text"] and "<b>bold" not in p2["passage text"]
    assert (p1["useful to llms"], p3["useful to llms"], p2["useful to llms"]) == ("|small|", "|small|big|", "||")
    assert shown["row"].to_list() == list(range(shown.height)) and shown["query order"].to_list() == [0, 1, 1, 1, 2]
    # One header per query, in the page's order (query order 0, 1, 2); q2 and q3 say they were not judged.
    heads = [_text(h) for h in query_heads(table, LLMS)]
    assert heads == [
        "q2 Capital of Tuvalu? gold: Funafuti not judged: past the first query (judgments.max_queries) "
        "small, no passage: ✗ none-q2 big, no passage: ✗ none-q2",
        "q1 Capital of France? gold: Paris small, no passage: ✗ none-q1 big, no passage: ✓ none-q1",
        "q3 x gold: y not judged: past the first query (judgments.max_queries) "
        "small, no passage: ✗ none-q3 big, no passage: ✗ none-q3",
    ]


def test_a_standalone_page_that_works_offline():
    pytest.importorskip("itables")
    table = explorer_table(*_frames(), llms=LLMS)
    page = explorer_html(table, LLMS, "wf-single", total_queries=7)
    assert page.startswith("<!DOCTYPE html>") and "<h1>wf-single: the examples behind the numbers</h1>" in page
    about = _text(page[page.index("<p>") : page.index("</p>")])
    assert about.startswith("LLMs: small, big. A row is one candidate passage of a query")
    assert "Shown: the first 3 of the dataset's 7 queries (report.explorer_queries), 5 rows." in about
    assert about.endswith(
        "2 of them read not judged: judgments and rankings ran on the first query only (judgments.max_queries)."
    )
    assert '<details id="legend" open>' in page
    # DataTables is inlined: no script, stylesheet or module is fetched from the network.
    assert not re.search(r"""src=["']?https?:|<link[^>]*href=["']?https?:|import [^;]* from ["']https?:""", page), (
        "a network fetch"
    )
    assert "<table" in page and len(page) > 500_000  # the DataTables bundle, base64
    # The same table makes the same page, byte for byte (itables would draw a random table id).
    assert page == explorer_html(explorer_table(*_frames(), llms=LLMS), LLMS, "wf-single", total_queries=7)


def _chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


# Run in the page once DataTables has drawn it: the layout at the window's size, the legend, the
# query headers, then the rows each filter keeps, a search, a hover and a click; written into the DOM
# for --dump-dom to return.
_PROBE = """<script>
(function probe() {
  const rows = () => [...document.querySelectorAll("table#explorer tbody tr:not(.dtrg-group)")]
    .filter((tr) => !tr.querySelector(".dt-empty"));
  if (!document.querySelector("table#explorer.dataTable") || !rows().length) return setTimeout(probe, 50);
  const box = (e) => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const out = { width: innerWidth, scrollWidth: document.documentElement.scrollWidth, headers: {}, counts: {} };
  for (const th of document.querySelectorAll("table#explorer thead th")) out.headers[th.textContent.trim()] = box(th);
  const legend = document.querySelector("#legend");
  out.legend = legend ? legend.innerText : "";
  out.legendBox = legend ? box(legend) : null;
  out.groups = [...document.querySelectorAll("table#explorer tr.dtrg-group")].map((g) => g.innerText);
  out.rows = rows().map((tr) => ({ text: tr.innerText, box: box(tr), textCell: box(tr.lastElementChild) }));
  const choose = (name, value) => {
    const select = document.querySelector(`select[name="${name}"]`);
    select.value = value;
    select.dispatchEvent(new Event("change"));
  };
  for (const [llm, kind] of COMBOS) {
    choose("useful-to", llm);
    choose("agreement", kind);
    out.counts[llm + "/" + kind] = rows().map((tr) => tr.lastElementChild.querySelector("b").textContent);
  }
  choose("useful-to", "");
  choose("agreement", "");
  const search = document.querySelector(".dt-search input");
  search.value = "Capital of France";
  search.dispatchEvent(new Event("input"));
  out.searched = rows().length;
  search.value = "";
  search.dispatchEvent(new Event("input"));
  const long = rows().find((tr) => tr.innerText.includes("LONG"));
  const cut = long.lastElementChild.querySelector(".cut");
  cut.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
  out.hoverTitle = cut.title;
  long.lastElementChild.click();
  out.openedHeight = long.getBoundingClientRect().height;
  out.openedClass = long.className;
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.append(pre);
})();
</script>"""

_WIDTH, _HEIGHT = 1400, 900


def _long_frames():
    """_frames with a long passage (p2), a long answer and a long gold answer list: what made the
    page too wide and its rows too tall."""
    candidates, queries, answers, gold, judgments, rankings = _frames()
    long_text = "LONG " + " ".join(f"word{i}" for i in range(250))
    candidates = candidates.with_columns(
        pl.when(pl.col("pid") == "p2").then(pl.lit(long_text)).otherwise(pl.col("text")).alias("text")
    )
    queries = queries.with_columns(
        pl.when(pl.col("qid") == "q1")
        .then(pl.lit([f"Paris alias {i}" for i in range(40)]))
        .otherwise(pl.col("answers"))
        .alias("answers")
    )
    single = answers["small"]["single"]
    answers["small"]["single"] = single.with_columns(
        pl.when(pl.col("pids").list.first() == "p2")
        .then(pl.lit("an answer that goes on " * 15))
        .otherwise(pl.col("output"))
        .alias("output")
    )
    return (candidates, queries, answers, gold, judgments, rankings), long_text


@pytest.mark.slow
def test_the_page_at_1400_px_in_headless_chromium(tmp_path):
    """The standalone page in a real browser, offline, in a 1,400 x 900 window: the heading and the
    legend on screen, the passage text column inside the window, rows a few lines tall (a long cell
    opens on a click, its full text on hover), and the filters and search keep the rows they say."""
    pytest.importorskip("itables")
    Image = pytest.importorskip("PIL.Image")
    browser = _chromium()
    if browser is None:
        pytest.skip("no headless Chromium (apt-get install chromium)")
    frames, long_text = _long_frames()
    table = explorer_table(*frames, llms=LLMS)
    page = explorer_html(table, LLMS, "wf-single")
    combos = [
        ["", ""],
        ["small", ""],
        ["big", ""],
        ["", "one"],
        ["", "all"],
        ["", "none"],
        ["small", "one"],
        ["big", "one"],
        ["small", "none"],
    ]
    (tmp_path / "page.html").write_text(page, encoding="utf-8")
    probed = page.replace("</body>", _PROBE.replace("COMBOS", json.dumps(combos)) + "</body>")
    (tmp_path / "probed.html").write_text(probed, encoding="utf-8")

    def chromium(*args: str, name: str) -> str:
        out = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={tmp_path / 'profile'}",
                "--virtual-time-budget=10000",
                f"--window-size={_WIDTH},{_HEIGHT}",
                *args,
                (tmp_path / name).as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return out.stdout

    chromium(f"--screenshot={tmp_path / 'page.png'}", name="page.html")
    dom = chromium("--dump-dom", name="probed.html")
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run: DataTables did not draw the table"
    probe = json.loads(html.unescape(found.group(1)))
    assert probe["width"] == _WIDTH
    # Nothing off-screen to the right; the passage text column inside the window, and wide.
    assert probe["scrollWidth"] <= _WIDTH
    left, top, right, _ = probe["headers"]["passage text"]
    assert right <= _WIDTH and right - left >= 0.4 * _WIDTH and top < _HEIGHT
    for llm in LLMS:
        assert probe["headers"][f"{llm}: with this passage"][2] <= _WIDTH
    # The legend names every column and mark, above the table, on the first screen.
    for mark in (
        "C #3",
        "U only",
        "human",
        "useful to",
        "one LLM only",
        "useful to none",
        "G(C)",
        "G(U)",
        "selected",
        "ranks",
        "not judged",
        "✓",
        "✗",
        "with this passage",
        "passage text",
    ):
        assert mark in probe["legend"], mark
    assert probe["legendBox"][3] < top
    # One header per query; those past the judged ones say so.
    assert len(probe["groups"]) == 3
    by_query = {g.split()[0]: g for g in probe["groups"]}
    assert "not judged" not in by_query["q1"] and "not judged: past the first query" in by_query["q2"]
    assert "not judged" in by_query["q3"]
    # Compact rows, the long passage's too; it opens on a click; hovering its text shows it whole.
    heights = [r["box"][3] - r["box"][1] for r in probe["rows"]]
    assert len(heights) == 5 and max(heights) <= 90, heights
    assert probe["openedHeight"] > 150, (probe["openedClass"], probe["openedHeight"])
    assert probe["hoverTitle"] == f"France {long_text}"
    # Each filter keeps the passages useful to that LLM (in its G(U)) / to every, one, no LLM: counted
    # here from the gold sets themselves.
    useful: dict[str, set[str]] = {}
    for (llm, cands), frame in frames[3].items():
        if cands == "U":
            for pid in frame["pid"]:
                useful.setdefault(pid, set()).add(llm)
    kind = {pid: "none" for pid in table["pid"]} | {
        pid: "all" if len(who) == len(LLMS) else "one" for pid, who in useful.items()
    }
    title = dict(table.select("pid", "title").iter_rows())
    for llm, agreement in combos:
        expected = [
            title[pid]
            for pid in table["pid"]
            if (not llm or llm in useful.get(pid, set())) and (not agreement or kind[pid] == agreement)
        ]
        assert probe["counts"][f"{llm}/{agreement}"] == expected, (llm, agreement)
    assert probe["counts"]["small/one"] == ["Paris"] and probe["counts"]["/all"] == ["Tuvalu"]
    assert probe["counts"]["big/one"] == [] and len(probe["counts"]["/"]) == 5
    assert probe["searched"] == 3  # q1's rows: its question is in their header
    # The screenshot shows the table's text where the DOM puts it: dark pixels in the passage text
    # of the first row, inside the 1,400 px window.
    shot = Image.open(tmp_path / "page.png").convert("L")
    assert shot.size == (_WIDTH, _HEIGHT)
    x0, y0, x1, y1 = (int(v) for v in probe["rows"][0]["textCell"])
    assert y1 <= _HEIGHT, "the first row is below the first screen"
    dark = sum(shot.crop((x0, y0, x1, y1)).histogram()[:100])  # pixels darker than 100 of 255
    assert dark > 200, dark


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
