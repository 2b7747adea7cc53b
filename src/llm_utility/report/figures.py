"""The paper's figures with matplotlib: Figure 1 (left: top-k gain; right: transfer), 2, 3 and 8.

Figures are built on ``matplotlib.figure.Figure`` rather than pyplot: saving renders PNG through Agg
and PDF through the pdf backend without a display, and importing this module never switches the
caller's backend (a notebook keeps its own). Each figure is saved as PNG and PDF atomically. Styling comes from a
small dict (the workflow's config), merged over ``DEFAULT_STYLE`` in ``resolve_style``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
import polars as pl
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..io import atomic_path

DEFAULT_STYLE: dict[str, Any] = {
    "dpi": 200,  # PNG resolution
    "cmap": "Blues",  # heatmaps
    "font_size": 9,
    "figure_width": None,  # inches for the whole figure; None = panel_width x panels per row
    "panel_width": 3.8,  # inches per panel
    "panel_height": 3.4,
    "ncols": 3,  # panels per row
    "bar_colors": ["#bdbdbd", "#2171b5"],  # Figure 1 left: no passages, top-k
    "labels": {},  # display names for LLM and dataset slugs, e.g. {"llama31-8b": "Llama3.1-8B"}
}


def resolve_style(style: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``DEFAULT_STYLE`` updated with ``style``'s non-null entries; unknown keys are an error."""
    style = dict(style or {})
    unknown = sorted(set(style) - set(DEFAULT_STYLE))
    if unknown:
        raise ValueError(f"unknown figure style key(s) {unknown}; known: {sorted(DEFAULT_STYLE)}")
    return {**DEFAULT_STYLE, **{k: v for k, v in style.items() if v is not None}}


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
    style: Mapping[str, Any] | None = None,
    title: str | None = None,
) -> None:
    """Figure 1 (left): per dataset panel, bars of has_answer (%) per LLM without passages and with the top-k.

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
            ax.set_ylabel("has_answer (%)")
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
    style: Mapping[str, Any] | None,
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
    title: str | None = None,
    style: Mapping[str, Any] | None = None,
) -> None:
    """Figures 1 (right), 2 and 8: one heatmap per dataset of ``analysis.transfer_matrix`` frames.

    Rows: whose gold set; columns: the answering LLM; cells: has_answer (%). The best gold set for
    each answering LLM (column maximum) is printed in bold.
    """
    _plot_matrices(matrices, png, pdf, title, style, ".1f", ("Answering LLM", "Gold set of"), "has_answer (%)", True)


def plot_overlap(
    matrices: Mapping[str, pl.DataFrame],
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    title: str | None = None,
    style: Mapping[str, Any] | None = None,
) -> None:
    """Figure 3: one heatmap per dataset of ``analysis.gold_overlap`` frames (passages shared per query)."""
    _plot_matrices(matrices, png, pdf, title, style, ".2f", ("", ""), "avg. overlapping passages", False)
