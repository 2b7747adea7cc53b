"""Rendering: Table 1 as CSV/Markdown/LaTeX with best-per-row bold, and the figure writers."""

from __future__ import annotations

import re

import polars as pl
import pytest

from llm_utility.config import with_defaults
from llm_utility.report import figures, notation, tables
from llm_utility.report.analysis import TABLE1_COLUMNS


def table1_frame() -> pl.DataFrame:
    values = {
        "llama_8b": [36.24, 58.12, 61.16, 70.46, 76.17, 80.30],
        "qwen": [30.0, 58.41, 59.89, 79.1, 74.59, 79.104],  # Human and G(U) tie at 2 decimals
    }
    sizes = [None, None, None, 3.0, 1.7, 1.94]
    rows = [
        ("NQ", llm, column, v, s, 10) for llm, vs in values.items() for column, v, s in zip(TABLE1_COLUMNS, vs, sizes)
    ]
    return pl.DataFrame(rows, schema=["dataset", "llm", "column", "correct", "avg_size", "n_queries"], orient="row")


def test_table1_blocks_format_and_bold():
    block = tables.table1_blocks(table1_frame(), "md")["NQ"]
    assert list(block.columns) == list(TABLE1_COLUMNS)
    assert list(block.index) == ["llama_8b", "qwen"]
    assert block.loc["llama_8b", "None"] == "36.24"
    # G(C) and G(U) are upper bounds by construction: marked, never bold, though G(U) is the largest.
    assert block.loc["llama_8b", "Human"] == "**70.46** (3.0)"
    assert block.loc["llama_8b", "G(C)"] == "76.17<sup>ub</sup> (1.7)"
    assert block.loc["llama_8b", "G(U)"] == "80.30<sup>ub</sup> (1.9)"
    assert block.loc["qwen", "Human"] == "**79.10** (3.0)"
    assert block.loc["qwen", "G(U)"] == "79.10<sup>ub</sup> (1.9)"  # ties Human at 2 decimals, still not ranked
    plain = tables.table1_blocks(table1_frame(), "plain")["NQ"]
    assert plain.loc["llama_8b", "G(U)"] == "80.30^ub (1.9)" and plain.loc["llama_8b", "Human"] == "70.46 (3.0)"


def test_table1_reask_block_follows_each_dataset(tmp_path):
    answer = table1_frame().with_columns(block=pl.lit("answer"))
    reask = answer.with_columns(block=pl.lit("reask"), correct=pl.col("correct") - 10.0)
    df = pl.concat([answer, reask]).select("block", *table1_frame().columns)
    blocks = tables.table1_blocks(df, "md")
    assert list(blocks) == ["NQ", "NQ, re-ask"]
    assert blocks["NQ, re-ask"].loc["llama_8b", "None"] == "26.24"
    # Re-asked, the gold sets are answered anew and can lose: they are ranked, and here G(U) wins.
    assert blocks["NQ, re-ask"].loc["llama_8b", "G(U)"] == "**70.30** (1.9)"
    assert blocks["NQ"].loc["llama_8b", "G(U)"] == "80.30<sup>ub</sup> (1.9)"
    csv, md, tex = tmp_path / "t1.csv", tmp_path / "t1.md", tmp_path / "t1.tex"
    tables.write_table1(df, csv, md, tex)
    text = md.read_text()
    assert text.index("### NQ (10 queries)\n") < text.index("### NQ, re-ask (10 queries)\n")
    assert "- `re-ask`: " in text
    assert pl.read_csv(csv).filter(pl.col("block") == "reask")["correct"].to_list() == reask["correct"].to_list()
    assert "NQ, re-ask" in tex.read_text()


def test_write_table1(tmp_path):
    df = table1_frame()
    csv, md, tex = tmp_path / "t1.csv", tmp_path / "t1.md", tmp_path / "t1.tex"
    tables.write_table1(df, csv, md, tex)

    back = pl.read_csv(csv)
    assert back.columns == df.columns
    assert back["correct"].to_list() == df["correct"].to_list()  # plain numbers, no markup

    text = md.read_text()
    assert text.startswith("## Table 1: ") and "### NQ (10 queries)" in text
    assert "- `re-ask`" not in text  # no re-ask block, so the legend does not explain one
    lines = [line for line in text.splitlines() if line.startswith("| llama_8b")]
    assert len(lines) == 1 and lines[0].count("**") == 2 and "**70.46** (3.0)" in lines[0]
    qwen = next(line for line in text.splitlines() if line.startswith("| qwen"))
    assert "30.00" in qwen  # not reparsed by tabulate into "30"
    assert qwen.count("**") == 2 and "79.10<sup>ub</sup> (1.9)" in qwen

    latex = tex.read_text()
    legend, tabular = latex.split("\\begin{tabular}")
    assert all(line.startswith("% ") for line in legend.splitlines())  # the legend, as comments
    assert "\\textsuperscript{ub}" in legend and "\\toprule" in tabular and "\\bottomrule" in tabular
    assert "\\textbf{70.46} (3.0)" in tabular and "80.30\\textsuperscript{ub} (1.9)" in tabular
    assert tabular.count("\\textbf{") == 2
    assert "llama\\_8b" in tabular  # names are escaped
    assert "$\\mathcal{G}_{q}$ ($U$)" in tabular
    assert "\\cline{1-8}\n\\bottomrule" not in tabular


# --- bold only where a method could have lost, and a legend of every notation a file shows ------------------


def test_comparison_marks_bold_only_a_cell_that_beats_another():
    marks = notation.comparison_marks
    assert marks([10.0, 30.0, 20.0], "max") == ["", "bold", ""]
    assert marks([10.0, 30.0, 20.0], "min") == ["bold", "", ""]
    assert marks([30.004, 29.996, 20.0], "max") == ["bold", "bold", ""]  # a tie for best at two decimals
    assert marks([0.0, 0.0, 0.0], "max") == ["tie", "tie", "tie"]  # a tie of zeros: no best
    assert marks([100.0, 100.0], "max") == ["tie", "tie"]
    assert marks([None, 40.0, float("nan")], "max") == ["", "", ""]  # one value: nothing to beat
    assert marks([40.0], "max") == [""]
    # Excluded cells are not ranked, however large; what is left competes.
    assert marks([90.0, 50.0, 40.0], "max", ["ub", "", ""]) == ["ub", "bold", ""]
    assert marks([90.0, 50.0, 50.0], "max", ["ng", "", ""]) == ["ng", "tie", "tie"]
    assert marks([90.0, 50.0], "max", ["ng", ""]) == ["ng", ""]
    assert marks([90.0, None], "max", ["ng", "ng"]) == ["ng", ""]  # a missing value carries no mark
    assert marks([90.0, 50.0], "", ["ng", ""]) == ["ng", ""]  # no ranking, the marks still show
    with pytest.raises(ValueError, match="2 values but 1 exclusions"):
        marks([1.0, 2.0], "max", ["ng"])


def selection_frame(**columns) -> pl.DataFrame:
    """One LLM's selection scores on one dataset (Table 2's tidy frame, the columns it reads)."""
    base = {
        "dataset": ["d1"] * 4,
        "llm": ["m"] * 4,
        "method": ["pointwise", "pointwise_pa", "listwise", "listwise_pa"],
        "f1": [80.0, 50.0, 40.0, 30.0],
        "unparsed_nonempty": [0.0, 0.0, 50.0, 49.9],
        "echo_nonempty": [60.0, 0.0, 0.0, 0.0],
        "accuracy_empty": [0.0, 0.0, 0.0, 0.0],
        "unparsed_empty": [0.0, 0.0, 0.0, 0.0],
        "echo_empty": [0.0, 0.0, 0.0, 0.0],
        "genuine": [40.0, 100.0, 50.0, 50.1],
        "n_nonempty": [3] * 4,
        "n_empty": [1] * 4,
    }
    return pl.DataFrame(base | columns)


def markdown_cells(text: str) -> dict[tuple[str, str], str]:
    """{(row's method, header): cell} of the Markdown tables in ``text`` (the second key column)."""
    cells, header = {}, None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        row = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = row
        elif not set(line) <= set("|:- "):
            cells |= {(row[1], h): c for h, c in zip(header, row)}
    return cells


def test_table2_never_bolds_a_mostly_non_genuine_cell_nor_a_tie_of_zeros(tmp_path):
    from llm_utility.pipeline.report import SELECTION_TABLES

    paths = {ext: tmp_path / f"t2.{ext}" for ext in ("csv", "md", "tex")}
    tables.write_grouped_table(selection_frame(), *paths.values(), SELECTION_TABLES["table2"])
    cells = markdown_cells(paths["md"].read_text())
    # pointwise has the best F1, but 60% of its queries echoed: marked, not ranked. listwise's 50%
    # unparsed is at the threshold; listwise_pa's 49.9% is below it, so it is ranked.
    assert cells[("pointwise", "F1")] == "80.00<sup>ng</sup>"
    assert cells[("pointwise_pa", "F1")] == "**50.00**"
    assert cells[("listwise", "F1")] == "40.00<sup>ng</sup>"
    assert cells[("listwise_pa", "F1")] == "30.00"
    # Acc is 0.00 everywhere: no method is best.
    assert {cells[(m, "Acc (empty gold)")] for m in ("pointwise", "listwise_pa")} == {"0.00<sup>tie</sup>"}
    assert sum(c.count("**") for c in cells.values()) == 2
    tex = paths["tex"].read_text().split("\\begin{tabular}")[1]
    assert tex.count("\\textbf{") == 1 and "\\textbf{50.00}" in tex and "80.00\\textsuperscript{ng}" in tex
    assert tex.count("0.00\\textsuperscript{tie}") == 4


def test_table4_an_echoed_ranking_is_not_best_even_where_it_ties_the_retriever(tmp_path):
    from llm_utility.pipeline.report import table4_layout

    scores = pl.DataFrame(
        {
            "dataset": ["d1"] * 3,
            "llm": ["m"] * 3,
            "method": ["retriever", "listwise_pa", "likelihood"],
            "ndcg": [75.0, 75.0, 44.0],
            "recall": [100.0, 100.0, 100.0],
            "unparsed": [0.0, 0.0, 0.0],
            "echo": [0.0, 100.0, 0.0],
        }
    )
    text = tables.grouped_markdown(scores, table4_layout(5))
    cells = markdown_cells(text)
    # The echoed ranking kept the retriever's order, so it ties the retriever: only the retriever is best.
    assert cells[("retriever", "N@5")] == "**75.00**" and cells[("listwise_pa", "N@5")] == "75.00<sup>ng</sup>"
    assert cells[("retriever", "R@5")] == cells[("likelihood", "R@5")] == "100.00<sup>tie</sup>"
    assert cells[("listwise_pa", "R@5")] == "100.00<sup>ng</sup>"
    assert "scores the retriever, not the LLM" in text


NOTATION_PATTERNS = {  # how each notation shows in a Markdown cell
    "**bold**": r"\*\*[0-9.]+\*\*",
    "<sup>ub</sup>": r"<sup>ub</sup>",
    "<sup>ng</sup>": r"<sup>ng</sup>",
    "<sup>tie</sup>": r"<sup>tie</sup>",
    "(x.x)": r" \([0-9]+\.[0-9]\)",
    "<sub>[lo, hi]</sub>": r"<sub>\[",
    "`-`": r"^-$",
}


def legend_and_cells(text: str) -> tuple[list[str], list[str]]:
    """The terms of a Markdown file's legend (its bullets, before the first table), and every cell
    of its tables."""
    legend_part, _, tables_part = text.partition("\n### ")
    terms = [line[2:].split(": ", 1)[0] for line in legend_part.splitlines() if line.startswith("- ")]
    cells = [
        c.strip()
        for line in tables_part.splitlines()
        if line.startswith("|") and not set(line) <= set("|:- ")
        for c in line.strip("|").split("|")
    ]
    return terms, cells


def notations_shown(cells: list[str]) -> set[str]:
    return {term for term, pattern in NOTATION_PATTERNS.items() if any(re.search(pattern, c) for c in cells)}


def test_each_legend_names_exactly_the_notation_its_tables_show(tmp_path):
    from llm_utility.pipeline.report import SELECTION_TABLES

    intervals = {"resamples": 500, "bootstrap_seed": 3, "confidence": 0.9}
    with_bounds = selection_frame(f1_lo=[70.0, 40.0, 30.0, 20.0], f1_hi=[90.0, 60.0, 50.0, 40.0])
    missing = selection_frame(accuracy_empty=[None, 0.0, 0.0, 0.0])
    plain = selection_frame(unparsed_nonempty=[0.0] * 4, echo_nonempty=[0.0] * 4, accuracy_empty=[0.0, 10.0, 0.0, 0.0])
    answer = table1_frame()
    reask = answer.with_columns(block=pl.lit("reask"))
    pages = {
        "bounds": tables.grouped_markdown(with_bounds, SELECTION_TABLES["table2"], intervals),
        "missing": tables.grouped_markdown(missing, SELECTION_TABLES["table2"]),
        "plain": tables.grouped_markdown(plain, SELECTION_TABLES["table2"]),
        "table1": tables.table1_markdown(answer),
        "table1 reask only": tables.table1_markdown(reask.select("block", *answer.columns)),
    }
    expected = {
        "bounds": {"**bold**", "<sup>ng</sup>", "<sup>tie</sup>", "<sub>[lo, hi]</sub>"},
        "missing": {"**bold**", "<sup>ng</sup>", "<sup>tie</sup>", "`-`"},
        "plain": {"**bold**"},
        "table1": {"**bold**", "<sup>ub</sup>", "(x.x)"},
        "table1 reask only": {"**bold**", "(x.x)"},
    }
    for name, text in pages.items():
        terms, cells = legend_and_cells(text)
        shown = notations_shown(cells)
        assert shown == expected[name], name  # the frames show what they were built to show
        assert set(terms) & set(NOTATION_PATTERNS) == shown, name
    bounds_terms = dict(line[2:].split(": ", 1) for line in pages["bounds"].splitlines() if line.startswith("- <sub>"))
    assert (
        "90% bootstrap" in bounds_terms["<sub>[lo, hi]</sub>"]
        and "500 times (seed 3)" in bounds_terms["<sub>[lo, hi]</sub>"]
    )


def test_a_legend_explains_every_column_of_the_judgment_tables():
    """Each value header of Tables 2 to 8 is named in its legend's glossary (the part before any
    parenthesis: `unparsed % (F1)` by `unparsed %`)."""
    from llm_utility.pipeline.report import RAG_TABLES, SELECTION_TABLES

    for name, layout in {**SELECTION_TABLES, **RAG_TABLES}.items():
        terms = " | ".join(term for term, _ in layout.glossary)
        for value in layout.values:
            base = value.header.split(" (")[0]
            assert base in terms, f"{name}: {value.header} unexplained"


def test_table2_markdown_is_one_narrow_table_per_dataset_and_the_tex_keeps_the_paper_layout(tmp_path):
    from llm_utility.pipeline.report import SELECTION_TABLES

    frame = pl.concat([selection_frame(), selection_frame(dataset=["d2"] * 4), selection_frame(dataset=["d3"] * 4)])
    paths = {ext: tmp_path / f"t2.{ext}" for ext in ("csv", "md", "tex")}
    tables.write_grouped_table(frame, *paths.values(), SELECTION_TABLES["table2"])
    text = paths["md"].read_text()
    assert [line for line in text.splitlines() if line.startswith("### ")] == [
        f"### {d} (4 judged queries)" for d in ("d1", "d2", "d3")
    ]
    headers = [line for line in text.splitlines() if line.startswith("| llm")]
    assert len(headers) == 3 and all(h.count("|") - 1 == 9 for h in headers)  # llm, method and 7 values
    tex = paths["tex"].read_text()
    assert "F1 d1 & F1 d2 & F1 d3" in tex  # the paper's layout: one column per dataset


def test_simple_tables_explain_a_missing_value_only_where_there_is_one():
    with_null = pl.DataFrame({"run": ["a", "b"], "recall": [80.0, None]})
    page = tables.simple_markdown(with_null, title="T", glossary=(("recall", "share found"),), missing="undefined")
    assert page.startswith("## T\n") and "- `recall`: share found" in page and "- `n/a`: undefined" in page
    assert re.search(r"^\| b +\| +n/a +\|$", page, re.MULTILINE)
    page = tables.simple_markdown(with_null.drop_nulls(), title="T", glossary=(("recall", "share found"),))
    assert "n/a" not in page


def test_latex_escape():
    assert tables.latex_escape("a_b&c%d$e#f{g}") == r"a\_b\&c\%d\$e\#f\{g\}"
    assert tables.latex_escape("x~y^z\\") == r"x\textasciitilde{}y\textasciicircum{}z\textbackslash{}"


def transfer() -> pl.DataFrame:
    return pl.DataFrame({"gold_from": ["a", "b", "Human"], "a": [90.0, 60.0, 70.0], "b": [55.0, 80.0, 75.0]})


def test_write_transfer_and_overlap_csv(tmp_path):
    path = tmp_path / "transfer.csv"
    tables.write_transfer_csv({"d1": transfer(), "d2": transfer()}, path, candidates="U")
    back = pl.read_csv(path)
    assert back.columns == ["dataset", "candidates", "gold_from", "llm", "correct"]
    assert back.height == 12
    row = back.filter((pl.col("dataset") == "d1") & (pl.col("gold_from") == "b") & (pl.col("llm") == "a"))
    assert row["correct"].item() == 60.0

    overlap = pl.DataFrame({"set": ["a", "Human"], "a": [1.5, 0.5], "Human": [0.5, 2.0]})
    path = tmp_path / "overlap.csv"
    tables.write_overlap_csv({"d1": overlap}, path)
    assert pl.read_csv(path).columns == ["dataset", "set_a", "set_b", "avg_overlap"]


def style(**overrides):
    """The figures section as the workflow passes it: the schema's defaults, then the config's values."""
    return with_defaults("figures", overrides)


def test_resolve_style_wants_the_validated_section():
    assert figures.resolve_style(style(dpi=80))["dpi"] == 80
    assert style()["cmap"] == "Blues"  # defaults come from config/schema.yaml, nowhere else
    with pytest.raises(ValueError, match="unknown figure style"):
        figures.resolve_style(style(colour="red"))
    with pytest.raises(ValueError, match="missing"):
        figures.resolve_style({"dpi": 80})


def assert_png_pdf(png, pdf):
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 1000


def test_plot_topk(tmp_path):
    df = pl.DataFrame(
        {
            "dataset": ["d1", "d1", "d2", "d2"],
            "llm": ["a", "b", "a", "b"],
            "none": [30.0, 20.0, 60.0, 50.0],
            "topk": [55.0, 50.0, 80.0, 45.0],
            "gain": [25.0, 30.0, 20.0, -5.0],
            "k": [20, 20, 20, 20],
        }
    )
    png, pdf = tmp_path / "f1l.png", tmp_path / "f1l.pdf"
    figures.plot_topk(df, png, pdf, style(dpi=60, labels={"a": "Model A"}))
    assert_png_pdf(png, pdf)


def test_plot_transfer_and_overlap(tmp_path):
    png, pdf = tmp_path / "f2.png", tmp_path / "f2.pdf"
    figures.plot_transfer({"d1": transfer(), "d2": transfer()}, png, pdf, style(dpi=60), "Transfer (U)")
    assert_png_pdf(png, pdf)
    overlap = pl.DataFrame({"set": ["a", "Human"], "a": [1.5, 0.5], "Human": [0.5, 2.0]})
    png, pdf = tmp_path / "f3.png", tmp_path / "f3.pdf"
    figures.plot_overlap({"d1": overlap}, png, pdf, style=style(dpi=60, cmap="viridis"))
    assert_png_pdf(png, pdf)
    with pytest.raises(ValueError, match="nothing to plot"):
        figures.plot_overlap({}, png, pdf, style())


def _figure4_inputs(llms, datasets, first=50_000.0):
    """Perplexities a few tens for every LLM but the first, ``first`` for it (tens of thousands, as
    SmolLM2's were before the scoring fix), and RAG percentages, for Figure 4."""
    rows, human = [], []
    for d in datasets:
        for i, llm in enumerate(llms):
            base = first if i == 0 else 20.0 + i
            rows += [(d, llm, "G", base * 0.8, base * 0.5, 4), (d, llm, "H", base, base * 0.7, 6)]
            human.append((d, llm, "human", "human", 100.0 * (i + 1) / (len(llms) + 1), 100.0, 5, 3))
    ppl = pl.DataFrame(
        rows, schema=["dataset", "llm", "passages", "ppl_passage", "ppl_query_passage", "n"], orient="row"
    )
    rag = pl.DataFrame(
        human, schema=["dataset", "llm", "context", "source", "unknown", "known", "n_unknown", "n_known"], orient="row"
    )
    return ppl, rag


def _overlapping_texts(fig) -> list[tuple[str, str]]:
    """Pairs of visible texts of a drawn figure whose boxes overlap. Rotated tick labels of one axis
    are parallel slanted lines whose boxes always overlap: they clash only when the gap between
    neighbouring lines (horizontal spacing x sin(rotation)) is less than the font's height."""
    import math

    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    # Tick labels exist for ticks outside the view limits too; only those inside are drawn.
    undrawn = set()
    for ax in fig.axes:
        for axis, (lo, hi) in ((ax.xaxis, sorted(ax.get_xlim())), (ax.yaxis, sorted(ax.get_ylim()))):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - 1e-9 * abs(hi - lo) <= tick.get_loc() <= hi + 1e-9 * abs(hi - lo):
                    undrawn |= {tick.label1, tick.label2}
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t not in undrawn]
    boxes = [(t, t.get_window_extent(renderer)) for t in texts]
    clashes = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1 :]:
            if not box_a.overlaps(box_b):
                continue
            rotated = a.get_rotation() % 180 and b.get_rotation() % 180
            if rotated and a.axes is b.axes and a.get_rotation() == b.get_rotation():
                gap = abs(box_a.x1 - box_b.x1) * math.sin(math.radians(a.get_rotation()))
                if gap > 1.05 * a.get_fontsize() * fig.dpi / 72:
                    continue
            clashes.append((a.get_text(), b.get_text()))
    return clashes


@pytest.mark.parametrize(
    "n_llms, n_datasets, first", [(2, 1, 5e4), (2, 3, 5e4), (4, 2, 5e4), (4, 6, 5e4), (2, 3, 40.0), (4, 6, 12.0)]
)
def test_figure4_log_axis_shows_every_llm_and_no_text_overlaps(tmp_path, monkeypatch, n_llms, n_datasets, first):
    llms = ["smollm2-135m", "gemma3-270m", "qwen3-14b", "llama31-8b-instruct"][:n_llms]
    datasets = ["wf-single", "wf-twohop", "wf-claims", "nq", "hotpotqa", "msmarco-fqa"][:n_datasets]
    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, png, pdf, dpi: drawn.append(fig))
    ppl, rag = _figure4_inputs(llms, datasets, first)
    figures.plot_perplexity(
        ppl,
        rag,
        tmp_path / "f4.png",
        tmp_path / "f4.pdf",
        style(dpi=72),
        title="Perplexity of human passages (top); RAG with them (bottom)",
    )
    [fig] = drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    assert _overlapping_texts(fig) == []
    tops = [ax for ax in fig.axes if ax.get_yscale() == "log"]
    assert len(tops) == n_datasets
    for ax in tops:
        # Every bar, the 20s as well as the 50,000s, is at least a tenth of the panel high.
        height = ax.get_window_extent().height
        bars = [p for p in ax.patches if p.get_height() == p.get_height()]
        assert len(bars) == 4 * n_llms
        assert min(p.get_window_extent().height for p in bars) > 0.1 * height
    if first < 100:  # a range of two decades or less is labelled 1, 2, 5, 10, 20 in plain numbers
        lo, hi = tops[0].get_ylim()  # the row shares its axis: the first panel carries the labels
        shown = {t.get_text() for t in tops[0].get_yticklabels() if lo <= t.get_position()[1] <= hi}
        assert {"1", "2", "5", "10", "20"} <= shown


def test_figure4_overlap_check_finds_a_title_on_a_legend(tmp_path):
    """The check above can fail: a legend drawn at the title's place is reported."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3), layout="constrained")
    ax = fig.subplots()
    ax.bar([0, 1], [1, 2], label="a long legend entry")
    fig.suptitle("a long title over the legend")
    fig.legend(loc="upper center")
    FigureCanvasAgg(fig).draw()
    assert _overlapping_texts(fig)


def test_a_table_page_comes_as_html_too_with_its_legend_and_marks(tmp_path):
    """write_page: the Markdown and, beside it, the same page as HTML (what the report shows inline)."""
    answer = table1_frame().with_columns(block=pl.lit("answer"))
    df = pl.concat([answer, answer.with_columns(block=pl.lit("reask"))]).select("block", *table1_frame().columns)
    tables.write_table1(df, tmp_path / "t1.csv", tmp_path / "t1.md", tmp_path / "t1.tex")
    text = (tmp_path / "t1.md").read_text()
    page = (tmp_path / "t1.html").read_text()
    assert page.startswith("<!doctype html>") and "<title>Table 1: " in page
    assert page.count("<table>") == text.count("\n| LLM ") == 2  # one per block
    items = re.findall(r"<li>(.*?)</li>", page)
    assert len(items) == text.count("\n- ")  # every legend line
    assert "<li><sup>ub</sup>: upper bound by construction" in page and "<li><b>bold</b>: " in page
    assert "&lt;dataset&gt;, re-ask" in page  # text in angle brackets is escaped, the marks' tags kept
    assert "<td style='text-align:right'><b>70.46</b> (3.0)</td>" in page
    assert "<td style='text-align:right'>80.30<sup>ub</sup> (1.9)</td>" in page
    assert "<td style='text-align:left'>llama_8b</td>" in page
