"""Rendering: Table 1 as CSV/Markdown/LaTeX with best-per-row bold, and the figure writers."""

from __future__ import annotations

import polars as pl
import pytest

from llm_utility.config import with_defaults
from llm_utility.report import figures, tables
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
    assert block.loc["llama_8b", "Human"] == "70.46 (3.0)"
    assert block.loc["llama_8b", "G(U)"] == "**80.30** (1.9)"
    assert block.loc["qwen", "Human"] == "**79.10** (3.0)"
    assert block.loc["qwen", "G(U)"] == "**79.10** (1.9)"
    plain = tables.table1_blocks(table1_frame(), "plain")["NQ"]
    assert plain.loc["llama_8b", "G(U)"] == "80.30 (1.9)"


def test_table1_reask_block_follows_each_dataset(tmp_path):
    answer = table1_frame().with_columns(block=pl.lit("answer"))
    reask = answer.with_columns(block=pl.lit("reask"), correct=pl.col("correct") - 10.0)
    df = pl.concat([answer, reask]).select("block", *table1_frame().columns)
    blocks = tables.table1_blocks(df, "md")
    assert list(blocks) == ["NQ", "NQ, re-ask"]
    assert blocks["NQ, re-ask"].loc["llama_8b", "None"] == "26.24"
    assert blocks["NQ, re-ask"].loc["llama_8b", "G(U)"] == "**70.30** (1.9)"  # bold within its own block
    csv, md, tex = tmp_path / "t1.csv", tmp_path / "t1.md", tmp_path / "t1.tex"
    tables.write_table1(df, csv, md, tex)
    text = md.read_text()
    assert text.index("### NQ\n") < text.index("### NQ, re-ask\n")
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
    assert "### NQ" in text
    lines = [line for line in text.splitlines() if line.startswith("| llama_8b")]
    assert len(lines) == 1 and lines[0].count("**") == 2 and "**80.30** (1.9)" in lines[0]
    qwen = next(line for line in text.splitlines() if line.startswith("| qwen"))
    assert "30.00" in qwen  # not reparsed by tabulate into "30"
    assert qwen.count("**") == 4  # the tie is bold twice

    latex = tex.read_text()
    assert latex.startswith("\\begin{tabular}") and "\\toprule" in latex and "\\bottomrule" in latex
    assert "\\textbf{80.30} (1.9)" in latex
    assert latex.count("\\textbf{") == 3
    assert "llama\\_8b" in latex  # names are escaped
    assert "$\\mathcal{G}_{q}$ ($U$)" in latex
    assert "\\cline{1-8}\n\\bottomrule" not in latex


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
