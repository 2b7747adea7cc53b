"""The paper's figures with matplotlib: Figure 1 (left: top-k gain; right: transfer), 2, 3 and 8.

Figures are built on ``matplotlib.figure.Figure`` rather than pyplot: saving renders PNG through Agg
and PDF through the pdf backend without a display, and importing this module never switches the
caller's backend (a notebook keeps its own). Each figure is saved as PNG and PDF atomically. Styling comes from a
dict: the workflow's validated ``figures`` config, whose defaults live in ``config/schema.yaml``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
import matplotlib.ticker
import numpy as np
import polars as pl
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..io import atomic_path


def resolve_style(style: Mapping[str, Any]) -> dict[str, Any]:
    """The validated ``figures`` section of the config (every key, defaults filled by the schema:
    ``llm_utility.config.schema_defaults("figures")`` gives them outside the workflow)."""
    from ..config import schema_defaults

    known = schema_defaults("figures")
    style = dict(style)
    unknown = sorted(set(style) - set(known))
    if unknown:
        raise ValueError(f"unknown figure style key(s) {unknown}; known: {sorted(known)}")
    missing = sorted(set(known) - set(style))
    if missing:
        raise ValueError(f"figure style is missing {missing}: pass the validated config's `figures` section")
    return style


def save_figure(fig: Figure, png: str | os.PathLike, pdf: str | os.PathLike, dpi: int) -> None:
    """Save ``fig`` as PNG and PDF, atomically and without timestamps (reruns give identical files)."""
    with atomic_path(png) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None})
    with atomic_path(pdf) as tmp:
        fig.savefig(tmp, format="pdf", metadata={"CreationDate": None, "Creator": None, "Producer": None})


def _grid(n: int, s: dict[str, Any], title: str | None) -> tuple[Figure, list[Axes]]:
    """A constrained-layout figure with ``n`` panels, ``s["ncols"]`` per row; spare axes removed."""
    if n == 0:
        raise ValueError("nothing to plot")
    ncols = max(1, min(int(s["ncols"]), n))
    nrows = math.ceil(n / ncols)
    width = s["figure_width"] or s["panel_width"] * ncols
    fig = Figure(figsize=(width, s["panel_height"] * nrows + (0.3 if title else 0)), layout="constrained")
    axes = list(np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel())
    for ax in axes[n:]:
        ax.remove()
    if title:
        fig.suptitle(title, fontsize=s["font_size"] + 2)
    return fig, axes[:n]


def _label(s: dict[str, Any], name: str) -> str:
    return s["labels"].get(name, name)


def plot_topk(
    df: pl.DataFrame,
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    style: Mapping[str, Any],
    title: str | None = None,
) -> None:
    """Figure 1 (left): per dataset panel, bars of correct answers (%) per LLM without passages and with the top-k.

    ``df`` is ``analysis.topk_gain``'s frame; the top-k bar is annotated with its value and the gain.
    """
    s = resolve_style(style)
    datasets = df["dataset"].unique(maintain_order=True).to_list()
    with matplotlib.rc_context({"font.size": s["font_size"]}):
        fig, axes = _grid(len(datasets), s, title)
        for ax, dataset in zip(axes, datasets):
            part = df.filter(pl.col("dataset") == dataset)
            ks = part["k"].unique().to_list()
            topk_name = f"Top-{ks[0]}" if len(ks) == 1 else "Top-k"
            x = np.arange(part.height)
            width = 0.38
            none_bars = ax.bar(x - width / 2, part["none"], width, label="None", color=s["bar_colors"][0])
            topk_bars = ax.bar(x + width / 2, part["topk"], width, label=topk_name, color=s["bar_colors"][1])
            small = s["font_size"] - 1
            ax.bar_label(none_bars, fmt="%.1f", padding=2, fontsize=small)
            ax.bar_label(
                topk_bars,
                labels=[f"{v:.1f}\n({g:+.1f})" for v, g in zip(part["topk"], part["gain"])],
                padding=2,
                fontsize=small,
            )
            top = max([*part["none"].to_list(), *part["topk"].to_list(), 1.0])
            ax.set_ylim(0, top * 1.22)  # room for the two-line labels
            ax.set_xticks(x, [_label(s, n) for n in part["llm"]], rotation=25, ha="right", rotation_mode="anchor")
            ax.set_ylabel("correct (%)")
            ax.set_title(_label(s, dataset))
            ax.spines[["top", "right"]].set_visible(False)
        # One legend for all panels, outside them: inside, it collides with the value labels.
        fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, frameon=False)
        save_figure(fig, png, pdf, s["dpi"])


def _heatmap(
    fig: Figure,
    ax: Axes,
    matrix: pl.DataFrame,
    s: dict[str, Any],
    fmt: str,
    colorbar_label: str,
    bold_column_max: bool,
) -> None:
    """One annotated heatmap; ``matrix``'s first column holds the row names, the others are the columns."""
    rows = matrix[matrix.columns[0]].to_list()
    cols = matrix.columns[1:]
    values = matrix.select(cols).to_numpy().astype(float)
    cmap = colormaps[s["cmap"]]
    im = ax.imshow(values, cmap=cmap, aspect="auto")
    ax.set_xticks(range(len(cols)), [_label(s, c) for c in cols], rotation=25, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(len(rows)), [_label(s, r) for r in rows])
    ax.tick_params(length=0)
    best = np.nanmax(values, axis=0, initial=-np.inf) if bold_column_max else None
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            v = values[i, j]
            if np.isnan(v):
                continue
            r, g, b, _ = cmap(im.norm(v))
            # Dark cells get white text, whatever the colormap's direction.
            color = "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"
            weight = "bold" if best is not None and v == best[j] else "normal"
            ax.text(j, i, format(v, fmt), ha="center", va="center", color=color, fontweight=weight)
    fig.colorbar(im, ax=ax, shrink=0.85).set_label(colorbar_label)


def _plot_matrices(
    matrices: Mapping[str, pl.DataFrame],
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    title: str | None,
    style: Mapping[str, Any],
    fmt: str,
    axis_labels: Sequence[str],
    colorbar_label: str,
    bold_column_max: bool,
) -> None:
    s = resolve_style(style)
    with matplotlib.rc_context({"font.size": s["font_size"]}):
        fig, axes = _grid(len(matrices), s, title)
        ncols = max(1, min(int(s["ncols"]), len(matrices)))
        for i, (ax, (dataset, matrix)) in enumerate(zip(axes, matrices.items())):
            _heatmap(fig, ax, matrix, s, fmt, colorbar_label, bold_column_max)
            ax.set_title(_label(s, dataset))
            ax.set_xlabel(axis_labels[0])
            # Only the first panel of a row: elsewhere it would crowd the neighbour's colorbar.
            if i % ncols == 0:
                ax.set_ylabel(axis_labels[1])
        save_figure(fig, png, pdf, s["dpi"])


def plot_transfer(
    matrices: Mapping[str, pl.DataFrame],
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    style: Mapping[str, Any],
    title: str | None = None,
) -> None:
    """Figures 1 (right), 2 and 8: one heatmap per dataset of ``analysis.transfer_matrix`` frames.

    Rows: whose gold set; columns: the answering LLM; cells: correct answers (%). The best gold set for
    each answering LLM (column maximum) is printed in bold.
    """
    _plot_matrices(matrices, png, pdf, title, style, ".1f", ("Answering LLM", "Gold set of"), "correct (%)", True)


def plot_overlap(
    matrices: Mapping[str, pl.DataFrame],
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    style: Mapping[str, Any],
    title: str | None = None,
) -> None:
    """Figure 3: one heatmap per dataset of ``analysis.gold_overlap`` frames (passages shared per query)."""
    _plot_matrices(matrices, png, pdf, title, style, ".2f", ("", ""), "avg. overlapping passages", False)


def plot_selection_transfer(
    matrices: Mapping[str, pl.DataFrame],
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    style: Mapping[str, Any],
    title: str | None = None,
) -> None:
    """Figure 9: one heatmap per dataset of ``judgments.selection_transfer`` frames: rows = whose
    selections, columns = the answering LLM, cells = correct answers (%); column maximum in bold."""
    _plot_matrices(matrices, png, pdf, title, style, ".1f", ("Answering LLM", "Selections of"), "correct (%)", True)


def plot_perplexity(
    ppl: pl.DataFrame,
    human: pl.DataFrame,
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    style: Mapping[str, Any],
    title: str | None = None,
) -> None:
    """Figure 4: per dataset, top: mean perplexity of human passages in (G) and out of (H) each LLM's
    gold set, alone and after the query (``judgments.perplexity_summary``); bottom: correct answers
    (%) with the human passages on unknown and known queries (``judgments.known_split`` rows of the
    ``human`` source).

    Perplexities span orders of magnitude between LLMs (and between a model's good and bad reads),
    so the top row has a log axis, shared by its panels, with bars rising from 1 (the perplexity of
    a text predicted with certainty): a bar's height is the mean negative log-likelihood. Each row's
    legend sits to the right of the panels, clear of the title and the tick labels."""
    s = resolve_style(style)
    datasets = (
        ppl["dataset"].unique(maintain_order=True).to_list() or human["dataset"].unique(maintain_order=True).to_list()
    )
    if not datasets:
        raise ValueError("nothing to plot")
    colors = s["bar_colors"]
    with matplotlib.rc_context({"font.size": s["font_size"]}):
        width = s["figure_width"] or s["panel_width"] * len(datasets) + 1.6  # + the legends' column
        fig = Figure(figsize=(width, 2 * s["panel_height"] + (0.3 if title else 0)), layout="constrained")
        axes = fig.subplots(2, len(datasets), squeeze=False, sharey="row")
        highest = ppl.select(pl.max_horizontal("ppl_passage", "ppl_query_passage").max()).item() if ppl.height else None
        for j, dataset in enumerate(datasets):
            top, bottom = axes[0][j], axes[1][j]
            part = ppl.filter(pl.col("dataset") == dataset)
            llms = part["llm"].unique(maintain_order=True).to_list()
            x = np.arange(len(llms))
            bars = [
                ("H", "ppl_passage", "H: passage"),
                ("G", "ppl_passage", "G: passage"),
                ("H", "ppl_query_passage", "H: query+passage"),
                ("G", "ppl_query_passage", "G: query+passage"),
            ]
            w = 0.8 / len(bars)
            for b, (which, column, label) in enumerate(bars):
                values = [
                    (part.filter((pl.col("llm") == llm) & (pl.col("passages") == which))[column].to_list() or [None])[0]
                    for llm in llms
                ]
                heights = [np.nan if v is None else v - 1 for v in values]  # from 1 up to the value
                top.bar(
                    x - 0.4 + w * (b + 0.5),
                    heights,
                    w,
                    bottom=1,
                    label=label,
                    color=colors[1] if which == "G" else colors[0],
                    alpha=1.0 if which == "G" else 0.55,
                    hatch="" if column == "ppl_passage" else "//",
                    edgecolor="black",
                    linewidth=0.3,
                )
            top.set_yscale("log")
            if highest is not None and highest == highest and highest > 1:
                top.set_ylim(1, highest * 2)
                if highest * 2 <= 300:  # two decades or less: label 1, 2, 5, 10, 20, 50... as plain numbers
                    top.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                    top.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                    top.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            top.set_xticks(x, [_label(s, n) for n in llms], rotation=30, ha="right", rotation_mode="anchor")
            top.set_title(_label(s, dataset))
            top.grid(axis="y", which="major", linewidth=0.4, alpha=0.4)
            top.spines[["top", "right"]].set_visible(False)
            part_h = human.filter(pl.col("dataset") == dataset)
            llms_h = part_h["llm"].unique(maintain_order=True).to_list()
            xh = np.arange(len(llms_h))
            for b, column in enumerate(("unknown", "known")):
                values = [(part_h.filter(pl.col("llm") == llm)[column].to_list() or [None])[0] for llm in llms_h]
                heights = [np.nan if v is None else v for v in values]
                bar = bottom.bar(
                    xh - 0.2 + 0.4 * b,
                    heights,
                    0.4,
                    label="Unk" if column == "unknown" else "Known",
                    color=colors[b % len(colors)],
                )
                # Whole percents once the bars get narrow, so neighbouring labels stay apart.
                bottom.bar_label(
                    bar, fmt="%.1f" if len(llms_h) <= 2 else "%.0f", padding=2, fontsize=s["font_size"] - 1
                )
            bottom.set_xticks(xh, [_label(s, n) for n in llms_h], rotation=30, ha="right", rotation_mode="anchor")
            bottom.set_ylim(0, 115)
            bottom.spines[["top", "right"]].set_visible(False)
        axes[0][0].set_ylabel("perplexity (log scale)")
        axes[1][0].set_ylabel("correct with human passages (%)")
        # Each row's legend right of its last panel: constrained layout makes room for it there,
        # below the title (a figure legend at the top or the side would share the title's row).
        for row in axes:
            row[-1].legend(
                *row[0].get_legend_handles_labels(),
                loc="upper left",
                bbox_to_anchor=(1.02, 1.0),
                borderaxespad=0.0,
                frameon=False,
            )
        if title:
            fig.suptitle(title, fontsize=s["font_size"] + 2)
        save_figure(fig, png, pdf, s["dpi"])


def plot_runs(
    table: pl.DataFrame, k: int, png: str | os.PathLike, pdf: str | os.PathLike, style: Mapping[str, Any]
) -> None:
    """The runs by judge: per dataset panel, NDCG@k (%) of every run under every judge (the human
    passages, each LLM's qrels over C and U), with its bootstrap interval over queries; which run
    is best can differ between judges. ``table`` is ``runs.run_table``'s frame."""
    s = resolve_style(style)
    column = f"ndcg@{k}"
    datasets = table["dataset"].unique(maintain_order=True).to_list()
    runs = table["run"].unique(maintain_order=True).to_list()
    colors = [colormaps["tab10"](i % 10) for i in range(len(runs))]
    with matplotlib.rc_context({"font.size": s["font_size"]}):
        fig, axes = _grid(len(datasets), s, f"Runs scored by each judge: NDCG@{k} (%)")
        for ax, dataset in zip(axes, datasets):
            part = table.filter(pl.col("dataset") == dataset)
            judges = part.select("judge", "pool").unique(maintain_order=True).rows()
            labels = ["Human" if pool == "human" else f"{_label(s, judge)} ({pool})" for judge, pool in judges]
            x = np.arange(len(judges))
            width = 0.8 / max(1, len(runs))
            for i, run in enumerate(runs):
                values, lo, hi = [], [], []
                for judge, pool in judges:
                    row = part.filter((pl.col("run") == run) & (pl.col("judge") == judge) & (pl.col("pool") == pool))
                    v = row[column][0] if row.height and row[column][0] is not None else np.nan
                    has_ci = row.height and f"{column}_lo" in row.columns and row[f"{column}_lo"][0] is not None
                    values.append(v)
                    lo.append(v - row[f"{column}_lo"][0] if has_ci else 0.0)
                    hi.append(row[f"{column}_hi"][0] - v if has_ci else 0.0)
                pooled = part.filter(pl.col("run") == run)["pool_run"].any()
                ax.bar(
                    x + (i - (len(runs) - 1) / 2) * width,
                    values,
                    width,
                    yerr=[lo, hi],
                    capsize=2,
                    color=colors[i],
                    label=f"{run} (pool C)" if pooled else run,
                    error_kw={"elinewidth": 0.8},
                )
            ax.set_xticks(x, labels, rotation=25, ha="right", rotation_mode="anchor")
            ax.set_ylabel(f"NDCG@{k} (%)")
            ax.set_ylim(0, 105)
            ax.set_title(_label(s, dataset))
            ax.spines[["top", "right"]].set_visible(False)
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside lower center", ncols=min(4, len(runs)), frameon=False)
        save_figure(fig, png, pdf, s["dpi"])
