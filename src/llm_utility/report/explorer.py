"""The explorer: the examples behind the numbers, one row per (query, passage of U).

After the tables, a researcher reads examples: why does this passage help one LLM and not another?
``explorer_table`` joins, for one dataset, what the workflow already wrote about each candidate
passage of each query:

- the query (question, gold answers) and the passage (rank in C or human-only, title, text);
- per LLM, its answer with no passage and with this passage alone, and whether each is correct
  (the ``none`` and ``single`` answer contexts);
- per LLM, the passage's marks: in G(C), in G(U), the judgment methods that selected it, its rank
  under each ranking method;
- across LLMs: which LLMs it is useful to (in their G(U)), and whether they disagree ("useful to
  one LLM only").

Inputs are the workflow's tables, already read (as in ``report.analysis``):
``candidates`` (``CANDIDATES_SCHEMA``: qid, pid, rank, in_C, human, title, text), ``queries``
(qid, question, answers), ``answers[llm][context]`` for the contexts ``none`` and ``single``,
``gold[(llm, "C" | "U")]`` (qid, pid), ``judgments[(llm, method)]`` (qid, pid, selected, ...) and
``rankings[(llm, method)]`` (qid, pid, rank, ...). Judgments and rankings cover the judged queries
only (``judgments.max_queries``); a passage of another query has no mark there.

The table's size is bounded by ``max_queries`` (the first queries of the dataset, in its order): at
paper scale a dataset of thousands of queries times 20+ passages would make an HTML page of hundreds
of MB, so the explorer shows a sample.

``explorer_html`` lays the table out as a page that explains itself and fits a laptop screen: a
heading (dataset, LLMs, what a row is, which queries were judged) and a legend of every column and
mark, then the rows grouped under a header per query (``query_heads``: question, gold answers, each
LLM's answer with no passage, "not judged" past ``judgments.max_queries``), one column per LLM (its
answer with the passage, the passage's marks), the passage text in what the fixed-width columns
leave, every cell cut to two or three lines, and filters by LLM and by agreement class.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence

import polars as pl

Frames = Mapping[tuple[str, str], pl.DataFrame]


def _key(*parts: str) -> str:
    return " ".join(parts)


def explorer_table(
    candidates: pl.DataFrame,
    queries: pl.DataFrame,
    answers: Mapping[str, Mapping[str, pl.DataFrame]],
    gold: Frames,
    judgments: Frames,
    rankings: Frames,
    llms: Sequence[str],
    max_queries: int | None = None,
) -> pl.DataFrame:
    """One row per (query, passage of U), in query order then rank (human-only passages last)."""
    order = queries.select("qid").with_row_index("query_order")
    if max_queries is not None:
        order = order.head(max_queries)
    rows = (
        candidates.join(order, on="qid", how="inner")
        .join(queries.select("qid", "question", "answers"), on="qid", how="left")
        .sort("query_order", pl.col("rank").fill_null(1 << 30), "pid")
        .select("qid", "question", "answers", "pid", "rank", "in_C", "human", "title", "text")
    )
    for llm in llms:
        none = answers[llm]["none"].select(
            "qid", pl.col("output").alias(_key(llm, "none")), pl.col("correct").alias(_key(llm, "none correct"))
        )
        single = (
            answers[llm]["single"]
            .filter(pl.col("pids").list.len() == 1)
            .select(
                "qid",
                pl.col("pids").list.first().alias("pid"),
                pl.col("output").alias(_key(llm, "passage")),
                pl.col("correct").alias(_key(llm, "passage correct")),
            )
            .unique(["qid", "pid"], keep="first")
        )
        rows = rows.join(none, on="qid", how="left").join(single, on=["qid", "pid"], how="left")
        for cands in ("C", "U"):
            marks = (
                gold[(llm, cands)]
                .select("qid", "pid")
                .unique()
                .with_columns(pl.lit(True).alias(_key(llm, f"G({cands})")))
            )
            rows = rows.join(marks, on=["qid", "pid"], how="left").with_columns(
                pl.col(_key(llm, f"G({cands})")).fill_null(False)
            )
        selected = [
            frame.filter(pl.col("selected")).select("qid", "pid", pl.lit(method).alias("method"))
            for (owner, method), frame in judgments.items()
            if owner == llm
        ]
        selected_by = (
            pl.concat(selected)
            .group_by("qid", "pid")
            .agg(pl.col("method").sort().str.join(", ").alias(_key(llm, "selected by")))
            if selected
            else pl.DataFrame(schema={"qid": pl.String, "pid": pl.String, _key(llm, "selected by"): pl.String})
        )
        ranked = [
            frame.select("qid", "pid", pl.format("{} {}", pl.lit(method), pl.col("rank")).alias("mark"))
            for (owner, method), frame in rankings.items()
            if owner == llm
        ]
        ranks = (
            pl.concat(ranked).group_by("qid", "pid").agg(pl.col("mark").sort().str.join(", ").alias(_key(llm, "ranks")))
            if ranked
            else pl.DataFrame(schema={"qid": pl.String, "pid": pl.String, _key(llm, "ranks"): pl.String})
        )
        rows = rows.join(selected_by, on=["qid", "pid"], how="left").join(ranks, on=["qid", "pid"], how="left")
    useful = pl.concat_list(
        [pl.when(pl.col(_key(llm, "G(U)"))).then(pl.lit(llm)).otherwise(None) for llm in llms]
    ).list.drop_nulls()
    rows = rows.with_columns(useful.alias("useful to"))
    # Judged: a query some judgment or ranking covers (every judged query has a row per passage in
    # each of them), so the page can say why the others have no selection or rank marks.
    marked = [frame.select("qid") for frame in (*judgments.values(), *rankings.values())]
    judged_qids = pl.concat(marked)["qid"].unique() if marked else pl.Series("qid", [], pl.String)
    n = len(llms)
    count = pl.col("useful to").list.len()
    rows = rows.with_columns(
        pl.col("qid").is_in(judged_qids.implode()).alias("judged"),
        pl.when(count == 0)
        .then(pl.lit("none"))
        .when(count == n)
        .then(pl.lit("all"))
        .when(count == 1)
        .then(pl.lit("one"))
        .otherwise(pl.lit("some"))
        .alias("agreement class"),
    )
    return rows.with_columns(
        pl.when(pl.col("useful to").list.len() == 0)
        .then(pl.lit("useful to none"))
        .when(pl.col("useful to").list.len() == n)
        .then(pl.lit("useful to all" if n > 1 else "useful"))
        .when(pl.col("useful to").list.len() == 1)
        .then(pl.format("useful to {} only", pl.col("useful to").list.first()))
        .otherwise(pl.format("useful to {}", pl.col("useful to").list.join(", ")))
        .alias("agreement"),
        pl.col("useful to").list.join(", "),
    )


# The agreement classes the page's filter offers, by the number of LLMs a passage is useful to.
AGREEMENT_CLASSES = {
    "all": "useful to all LLMs",
    "one": "useful to one LLM only",
    "some": "useful to some LLMs, not all",
    "none": "useful to none",
}

# The page's columns beside the LLMs' (one each, "<llm>: with this passage"), in their order.
# Hidden: "query" (its id, question and gold answers, for the search), the order of rows and
# queries, and what the filters read.
_SHOWN = ("passage", "useful to")
_HIDDEN = ("query", "row", "query order", "useful to llms", "agreement class")


def _esc(value) -> str:
    return "" if value is None else html.escape(str(value))


def _answer(output: str | None, correct: bool | None) -> str:
    """``✓ answer`` or ``✗ answer``; blank where the run made no such call."""
    if correct is None:
        return ""
    mark = '<span class="ok">✓</span>' if correct else '<span class="bad">✗</span>'
    return f"{mark} {_esc(output)}"


def _marks(row: Mapping, llm: str) -> str:
    marks = [name for name in ("G(C)", "G(U)") if row[_key(llm, name)]]
    if row[_key(llm, "selected by")]:
        marks.append(f"selected: {_esc(row[_key(llm, 'selected by')])}")
    if row[_key(llm, "ranks")]:
        marks.append(f"ranks: {_esc(row[_key(llm, 'ranks')])}")
    if not row["judged"]:
        marks.append('<span class="nj">not judged</span>')
    return " · ".join(marks)


def _query_head(row: Mapping, llms: Sequence[str], not_judged: str) -> str:
    head = (
        f'<div class="qhead"><span class="qid">{_esc(row["qid"])}</span> <b class="line">{_esc(row["question"])}</b> '
        f'<span class="gold line">gold: {_esc(" | ".join(row["answers"] or []))}</span>'
    )
    if not row["judged"]:
        head += f' <span class="nj">not judged: {not_judged}</span>'
    none = "".join(
        f'<div class="line"><span class="who">{_esc(llm)}, no passage:</span> '
        f"{_answer(row[_key(llm, 'none')], row[_key(llm, 'none correct')])}</div>"
        for llm in llms
    )
    return f'{head}</div><div class="nopass">{none}</div>'


def _useful_label(row: Mapping, llms: Sequence[str]) -> str:
    kind, useful = row["agreement class"], row["useful to"]
    if kind == "none":
        return "none"
    if len(llms) == 1:
        return llms[0]
    return {"all": "all", "one": f"{useful} only"}.get(kind, useful)


def judged_queries(table: pl.DataFrame) -> int:
    """How many of the page's queries some judgment or ranking covers (``explorer_table``'s
    ``judged``): the first ``judgments.max_queries`` of the dataset, which are the explorer's first
    ones too (both take the dataset's order)."""
    return table.filter(pl.col("judged"))["qid"].n_unique()


def _queries(n: int) -> str:
    return "query" if n == 1 else f"{n} queries"


def _not_judged(judged: int) -> str:
    """Why a query has no selection or rank marks, in its header."""
    if judged == 0:
        return "no judgment or ranking in this run"
    return f"past the first {_queries(judged)} (judgments.max_queries)"


def explorer_display(table: pl.DataFrame, llms: Sequence[str]) -> pl.DataFrame:
    """The explorer as the page shows it, one HTML cell per column (text escaped): ``passage``
    (``C #rank`` or ``U only``, ``human``), ``useful to`` (``all``, ``<llm> only``, ``<llms>``,
    ``none``), per LLM ``<llm>: with this passage`` (✓/✗ and its answer, then the passage's marks
    for that LLM) and ``passage text``; hidden: ``query`` (its id, question and gold answers, which
    the search reads), the rows' and queries' order, and the ``useful to llms`` (``|a|b|``) and
    ``agreement class`` (a key of ``AGREEMENT_CLASSES``) the page's filters read. The header of each
    query's rows is ``query_heads``'."""
    query_order: dict[str, int] = {}
    rows = []
    for i, row in enumerate(table.iter_rows(named=True)):
        passage = _esc(f"C #{row['rank']}" if row["in_C"] else "U only")
        if row["human"]:
            passage += '<br><span class="human">human</span>'
        query = f"{row['qid']} {row['question']} gold: {' | '.join(row['answers'] or [])}"
        cells = {"query": _esc(query), "passage": passage, "useful to": _esc(_useful_label(row, llms))}
        for llm in llms:
            answer = _answer(row[_key(llm, "passage")], row[_key(llm, "passage correct")])
            cells[f"{llm}: with this passage"] = (
                f'<div class="cut">{answer}</div><div class="marks cut">{_marks(row, llm)}</div>'
            )
        cells["passage text"] = f'<div class="cut cut3"><b>{_esc(row["title"])}</b> {_esc(row["text"])}</div>'
        useful = row["useful to"]
        cells |= {
            "row": i,
            "query order": query_order.setdefault(row["qid"], len(query_order)),
            "useful to llms": "|" + "|".join(useful.split(", ") if useful else []) + "|",
            "agreement class": row["agreement class"],
        }
        rows.append(cells)
    columns = ["query", *_SHOWN, *(f"{llm}: with this passage" for llm in llms), "passage text", *_HIDDEN[1:]]
    schema = {c: pl.Int64 if c in ("row", "query order") else pl.String for c in columns}
    return pl.DataFrame(rows, schema=schema)


def query_heads(table: pl.DataFrame, llms: Sequence[str]) -> list[str]:
    """The header of each query's rows, in the page's query order (HTML, text escaped): what is the
    same on all of them, the question, gold answers, each LLM's answer with no passage and whether
    the query was judged, a line each. Written once per query, where a column would repeat it on
    every row."""
    note = _not_judged(judged_queries(table))
    firsts = table.unique("qid", keep="first", maintain_order=True)
    return [_query_head(row, llms, note) for row in firsts.iter_rows(named=True)]


# The page fits a laptop screen (1,400 px): fixed column widths (the passage text takes what the
# other columns leave), cells cut to two or three lines (whole on hover, or on a click on the row).
_PAGE_CSS = """
body { font: 14px/1.35 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 8px 14px; color: #1f2328; }
h1 { font-size: 18px; margin: 0 0 4px; }
#about p { margin: 0 0 4px; }
#legend { font-size: 12.5px; margin: 0 0 4px; }
#legend summary { cursor: pointer; font-weight: 600; }
#legend dl { display: grid; grid-template-columns: max-content minmax(0, 1fr) max-content minmax(0, 1fr);
  gap: 1px 10px; margin: 2px 0 0; }
#legend dt { font-weight: 600; white-space: nowrap; }
#legend dd { margin: 0; }
.filters label { margin-left: 14px; }
table#explorer { table-layout: fixed; width: 100% !important; margin: 0; }
table#explorer td { vertical-align: top; overflow-wrap: anywhere; }
table#explorer tbody tr:not(.dtrg-group) { cursor: pointer; }
table#explorer tr.dtrg-group th { background: #eef2f7; text-align: left; font-weight: normal; padding: 4px 8px; }
.qhead { display: flex; gap: 8px; align-items: baseline; }
.qhead .line { flex: 0 1 auto; min-width: 0; }
.qhead .gold { flex: 1 1 0; min-width: 6em; }
.qhead .qid, .qhead .nj { flex: none; }
tr.open .qhead { flex-wrap: wrap; }
.nopass { display: grid; grid-template-columns: repeat(var(--llms), minmax(0, 1fr)); gap: 0 14px; font-size: 13px; }
.cut { display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2; overflow: hidden; }
.cut3 { -webkit-line-clamp: 3; }
.line { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
tr.open .cut { display: block; -webkit-line-clamp: none; overflow: visible; }
tr.open .line { white-space: normal; }
.marks { color: #57606a; font-size: 12px; }
.ok { color: #1a7f37; font-weight: 700; }
.bad { color: #cf222e; font-weight: 700; }
.nj { color: #9a6700; font-style: italic; }
.qid, .who, .gold, .human { color: #57606a; }
.qid { font-size: 12px; }
"""

# The filters (DataTables' fixed searches, beside the search box) and the cells that open.
_PAGE_JS = """function (settings) {
  if (settings.explorerWired) return;
  settings.explorerWired = true;
  const api = settings.api, container = api.table().container();
  const llm = container.querySelector('select[name="useful-to"]');
  const agreement = container.querySelector('select[name="agreement"]');
  const apply = () => {
    const who = llm.value, kind = agreement.value;
    api.search.fixed("useful-to", who ? (s, row) => row[USEFUL].includes("|" + who + "|") : null);
    api.search.fixed("agreement", kind ? (s, row) => row[KIND] === kind : null);
    api.draw();
  };
  llm.addEventListener("change", apply);
  agreement.addEventListener("change", apply);
  const body = api.table().body();
  body.addEventListener("click", (event) => {
    const row = event.target.closest("tr");
    if (row && !String(window.getSelection())) row.classList.toggle("open");
  });
  body.addEventListener("mouseover", (event) => {
    const cell = event.target.closest(".cut, .line");
    if (cell && !cell.title && (cell.scrollHeight > cell.clientHeight + 1 || cell.scrollWidth > cell.clientWidth + 1))
      cell.title = cell.textContent;
  });
}"""


def _legend(llms: Sequence[str]) -> str:
    one = f"{llms[0]} only" if llms else "<llm> only"
    items = [
        (
            "query rows (shaded)",
            "the query's id, question and gold answers; each LLM's answer with no passage "
            '(<span class="ok">✓</span> correct, <span class="bad">✗</span> wrong: it holds a gold answer, or states '
            "a claim's gold verdict)",
        ),
        (
            "passage: C #3",
            "rank 3 of the retriever's top-k (C, the candidates the judgments see); "
            '<span class="human">human</span>: annotated relevant by humans',
        ),
        ("passage: U only", "a human passage the retriever missed: U = C and these"),
        (
            "useful to",
            f"the LLMs with the passage in their G(U): all, {_esc(one)} (useful to one LLM only), "
            "two or more, none (useful to none)",
        ),
        (
            "<llm>: with this passage",
            '<span class="ok">✓</span>/<span class="bad">✗</span> the LLM\'s answer with this passage alone; '
            "under it, the passage's marks for that LLM",
        ),
        (
            "G(C), G(U)",
            "in the LLM's gold set among C, among U: with it alone the LLM answers correctly, "
            "with no passage it does not (a query it knows has empty gold sets)",
        ),
        ("selected: pointwise, …", "the judgment methods (judgments.methods) that selected the passage"),
        ("ranks: likelihood 2, …", "its rank under each ranking method (rankings.methods), 1 first"),
        (
            "not judged",
            "no judgment or ranking ran on the query (past judgments.max_queries): no selected or ranks "
            "marks; its gold sets still show",
        ),
        ("no marks", "in neither gold set, and not selected; a judged query still shows its ranks"),
        (
            "passage text",
            "its title, then its text. Cells show 2-3 lines: hover a cut cell to read it, click a row to open it",
        ),
        (
            "filters",
            "Useful to, Agreement: the passages useful to that LLM, or to all / one only / none; "
            "Search: every column, and the query's id, question and gold answers",
        ),
    ]
    cells = "".join(f"<dt>{_esc(term)}</dt><dd>{text}</dd>" for term, text in items)
    return f'<details id="legend" open><summary>Legend</summary><dl>{cells}</dl></details>'


def _filters(llms: Sequence[str]) -> str:
    who = "".join(f'<option value="{_esc(llm)}">{_esc(llm)}</option>' for llm in llms)
    kinds = (
        ("all", "none") if len(llms) == 1 else ("all", "one", "none") if len(llms) == 2 else tuple(AGREEMENT_CLASSES)
    )
    labels = {**AGREEMENT_CLASSES, "all": "useful" if len(llms) == 1 else AGREEMENT_CLASSES["all"]}
    kind = "".join(f'<option value="{k}">{labels[k]}</option>' for k in kinds)
    # autocomplete off: a reloaded page would otherwise show a choice that no longer filters.
    return (
        '<span class="filters"><label>Useful to <select name="useful-to" autocomplete="off">'
        f'<option value="">any LLM or none</option>{who}</select></label>'
        f'<label>Agreement <select name="agreement" autocomplete="off"><option value="">all rows</option>{kind}'
        "</select></label></span>"
    )


def _about(table: pl.DataFrame, llms: Sequence[str], total_queries: int | None) -> str:
    queries = table["qid"].n_unique()
    shown = (
        f"the first {queries} of the dataset's {total_queries} queries (report.explorer_queries)"
        if total_queries is not None and total_queries > queries
        else f"all {queries} queries"
    )
    judged = judged_queries(table)
    if judged == queries:
        marks = "Every query shown was judged and ranked."
    elif judged == 0:
        marks = (
            'They read <span class="nj">not judged</span>: no judgment or ranking covers them '
            "(judgments.methods, rankings.methods)."
        )
    else:
        marks = (
            f'{queries - judged} of them read <span class="nj">not judged</span>: judgments and rankings ran on '
            f"the first {_queries(judged)} only (judgments.max_queries)."
        )
    return (
        f"<p>LLMs: {', '.join(f'<b>{_esc(llm)}</b>' for llm in llms)}. A row is one candidate passage of a query "
        "(the retriever's top-k C, then the human passages outside C) with each LLM's answer given that passage "
        f"alone, under a shaded row of its query. Shown: {shown}, {table.height} rows. {marks}</p>"
    )


def explorer_html(
    table: pl.DataFrame, llms: Sequence[str], dataset: str, *, total_queries: int | None = None, **options
) -> str:
    """A standalone HTML page of the explorer that works offline (itables' DataTables bundle inlined,
    ``connected=False``): a heading (the dataset, its LLMs, what a row is, which queries were judged),
    a legend of every column and mark, then the table, its rows grouped under their query, with the
    search box and two filters: useful to an LLM, and the agreement class (``AGREEMENT_CLASSES``).
    ``total_queries``: the dataset's, when the page shows only its first ones."""
    # Only here: the tables and figures never need itables. Its offline mode inlines the DataTables
    # bundle it ships (what `init_notebook_mode(connected=False)` shows in a notebook) once per page.
    from itables import JavascriptFunction, to_html_datatable
    from itables import options as itables_options
    from itables.javascript import generate_init_offline_itables_html

    shown = explorer_display(table, llms)
    at = {name: i for i, name in enumerate(shown.columns)}
    per_llm = [at[f"{llm}: with this passage"] for llm in llms]
    hidden = [at[name] for name in _HIDDEN]
    script = _PAGE_JS.replace("USEFUL", str(at["useful to llms"])).replace("KIND", str(at["agreement class"]))
    heads = json.dumps(query_heads(table, llms))
    head = f"function (rows) {{ return {heads}[rows.data()[0][{at['query order']}]]; }}"
    title = f"{dataset}: the examples behind the numbers"
    body = to_html_datatable(
        shown,
        connected=False,
        allow_html=True,  # every cell's text is escaped by explorer_display
        showIndex=False,
        pageLength=25,
        lengthMenu=[10, 25, 100, 500],
        classes="display compact",
        style={"table-layout": "fixed", "width": "100%", "margin": "0"},
        autoWidth=False,
        maxBytes=0,
        columnDefs=[
            {"targets": hidden, "visible": False},
            # The query column is searched (its id, question, gold answers); the orders and the
            # filters' columns are not (a search for "3" would find row 3 of every page).
            {"targets": hidden[1:], "searchable": False},
            {"targets": at["passage"], "width": "6%"},
            {"targets": at["useful to"], "width": "8%"},
            {"targets": per_llm, "width": f"{min(16.0, 48.0 / max(len(llms), 1)):.4g}%"},
            # Rows stay under their query: a click on a column sorts within each query.
            {"targets": at["passage"], "orderData": [at["query order"], at["row"]]},
            *(
                {"targets": i, "orderData": [at["query order"], i]}
                for i in (at["useful to"], *per_llm, at["passage text"])
            ),
        ],
        # Rows grouped under their query's header, written once per query.
        rowGroup={"dataSrc": at["query order"], "startRender": JavascriptFunction(head)},
        order=[[at["query order"], "asc"], [at["row"], "asc"]],
        show_dtypes=False,
        layout={
            "topStart": ["pageLength", {"div": {"html": _filters(llms)}}],
            "topEnd": "search",
            "bottomStart": "info",
            "bottomEnd": "paging",
        },
        language={"info": "rows _START_ to _END_ of _TOTAL_", "lengthMenu": "_MENU_ rows a page"},
        # Wired on the first draw: itables 2.9 takes initComplete out of the options before it
        # evaluates their JavaScript, so a JavaScript initComplete never becomes a function.
        drawCallback=JavascriptFunction(script),
        display_logo_when_loading=False,
        # One table per page: a fixed id, where itables draws a random one, so the same table
        # makes the same page, byte for byte.
        **{"table_id": "explorer", **options},
    )
    bundle = generate_init_offline_itables_html(itables_options.dt_bundle)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_esc(title)}</title>\n<style>{_PAGE_CSS}:root {{ --llms: {max(len(llms), 1)}; }}\n</style></head>\n"
        f'<body>\n<header id="about"><h1>{_esc(title)}</h1>\n{_about(table, llms, total_queries)}\n'
        f"{_legend(llms)}</header>\n{bundle}\n{body}\n</body></html>\n"
    )
