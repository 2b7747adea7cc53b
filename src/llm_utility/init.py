"""``python -m llm_utility.init``: a config for your own data, with the paper's settings, checked and
costed before anything runs.

    python -m llm_utility.init --corpus FILE.tsv --queries FILE.jsonl [--task qa|fact] --out config/mine.yaml
    python -m llm_utility.init --corpus FILE.tsv --queries FILE.jsonl --models demo --budget 10   # a first run

It reads the corpus (DPR layout: ``id<TAB>text<TAB>title``) and the queries (JSONL) as the workflow's
loaders will (``data.local``: the TSV's quoting, unique ids, claim labels, every human passage id in
the corpus), so a bad line stops here with its file and line instead of inside a job. It writes a
config that takes everything but the data from ``config/paper.yaml`` (its LLMs, retriever, top-k,
every judgment method on every query, the re-ask, a BM25 run), not from the CPU demo's cuts, with the
query count, passage size and query shards filled in from the files. Then it prints what the run will
cost, from the project's own estimates (``workflow.estimates``: model calls, tokens and hours at the
LLMs' configured throughputs) and measured rates (``sizing``: a CPU run's time on this machine; the
BM25 build's and the index's memory, docs/performance.md), against this machine's memory and GPUs,
and what to change when it does not fit.

``--models demo`` takes the CPU demo's two LLMs and its MiniLM encoder instead (a machine without a
GPU); the written file says so where it names the LLMs. ``--limit N`` keeps the first N queries;
``--budget MINUTES`` (CPU models) cuts the run until its estimate fits (``sizing.fit``) and says what
it cut. The written file's header records the command as given.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .config import SCHEMA
from .data.local import iter_dpr_tsv, load_queries_jsonl
from .data.readers import DataFormatError
from .sizing import (
    BM25_S_PER_PASSAGE,
    cpu_flags,
    cpu_kind,
    cpu_run,
    demo_cuts,
    describe_cut,
    encode_seconds,
    fit,
    model_cost,
)

REPO = SCHEMA.parents[1]
PAPER_CONFIG = REPO / "config" / "paper.yaml"
DEMO_CONFIG = REPO / "config" / "config.yaml"
# The names findings.json reads as the paper's benchmarks (report.findings.framework.PAPER_DATASETS).
PAPER_DATASETS = {
    "nq": "NQ",
    "triviaqa": "TriviaQA",
    "hotpotqa": "HotpotQA",
    "2wikiqa": "2WikiQA",
    "msmarco-fqa": "MS MARCO-FQA",
    "fever": "FEVER",
}

# Rates measured in docs/performance.md ("BM25 at paper scale"), for what the CPU estimate
# (llm_utility.sizing) does not cover: the BM25 build's peak memory.
BM25_BYTES_PER_PASSAGE = 5.6e3
# Passages per encoding job: config/paper.yaml's 64 shards of its ~34M passages.
PASSAGES_PER_ENCODING_SHARD = 530_000
# Tokens per word of a passage with its title: DPR's 100-word passages are ~165 tokens
# (resources.estimate.passage_tokens).
TOKENS_PER_WORD = 1.65
# File names that say nothing of the data: the dataset and corpus are named after their files, and
# the names are in every table and path, so init suggests --name / --corpus-name for these.
GENERIC_NAMES = {
    "queries", "query", "questions", "question", "claims", "qa", "data", "dataset", "input", "test", "dev",
    "train", "eval", "corpus", "passages", "passage", "collection", "docs", "documents", "texts",
}  # fmt: skip
DIMENSIONS = {"bge-m3": 1024, "minilm": 384}


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return slug if slug and slug[0].isalnum() else f"d-{slug}".strip("-")


def machine() -> dict[str, Any]:
    """This machine's memory (bytes), CPU cores and flags, whether it has an NVIDIA GPU (nvidia-smi),
    and the LLMs whose weights are already materialized (resources/models/<llm>)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    models = REPO / "resources" / "models"
    return {
        "memory": memory,
        "cores": os.cpu_count() or 1,
        "gpu": shutil.which("nvidia-smi") is not None,
        "cpu_flags": cpu_flags(),
        "materialized": {p.parent.name for p in models.glob("*/manifest.json")},
    }


def check_corpus(path: Path) -> dict[str, Any]:
    """Read the corpus as the workflow will (``data.local.iter_dpr_tsv``; ids unique, as
    ``write_corpus`` checks): its ids, passage count and mean words per passage."""
    pids: dict[str, int] = {}
    words = 0
    for chunk in iter_dpr_tsv(path):
        for pid, text, title, line in zip(chunk.pids, chunk.texts, chunk.titles, chunk.lines):
            if pid in pids:
                raise DataFormatError(str(path), line, f"duplicate id {pid!r} (first on line {pids[pid]})")
            pids[pid] = line
            words += len(text.split()) + len(title.split())
    if not pids:
        raise DataFormatError(str(path), None, "no passages (the file is empty or has only a header)")
    return {"pids": set(pids), "passages": len(pids), "mean_words": words / len(pids)}


def check_queries(path: Path, corpus_pids: set[str], task: str) -> dict[str, Any]:
    """Read the queries as the workflow will (``data.local.load_queries_jsonl``: ids, answers, claim
    labels, every human passage id in the corpus)."""
    df = load_queries_jsonl(path, corpus_pids=corpus_pids, default_task=task)
    humans = df["human_pids"].list.len()
    return {
        "queries": df.height,
        "tasks": dict(sorted(zip(*df["task"].value_counts(sort=True).to_dict(as_series=False).values()))),
        "human_passages": int(humans.sum()),
        "with_human": int((humans > 0).sum()),
    }


def build_config(
    corpus: Path,
    queries: Path,
    name: str,
    corpus_name: str,
    task: str,
    models: str,
    corpus_info: Mapping[str, Any],
    query_info: Mapping[str, Any],
) -> dict[str, Any]:
    """The config: config/paper.yaml's settings (or the demo's models), the user's files as its only
    corpus and dataset, and the sizes the estimates need."""
    paper = yaml.safe_load(PAPER_CONFIG.read_text(encoding="utf-8"))
    # Everything of the paper's config but its data (data_dir, downloads, corpora, datasets).
    config: dict[str, Any] = {
        k: v for k, v in paper.items() if k not in ("data_dir", "downloads", "corpora", "datasets")
    }
    retrievers = {"bge-m3": dict(paper["retrievers"]["bge-m3"]), "bm25": dict(paper["retrievers"]["bm25"])}
    retriever = "bge-m3"
    if models == "demo":
        demo = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
        retrievers = {"minilm": demo["retrievers"]["minilm"], "bm25": dict(paper["retrievers"]["bm25"])}
        retriever = "minilm"
        if task == "fact" or "fact" in query_info["tasks"]:
            config["verdict_synonyms"] = demo["verdict_synonyms"]
    passages = corpus_info["passages"]
    shards = max(1, math.ceil(passages / PASSAGES_PER_ENCODING_SHARD))
    retrievers[retriever]["shards"] = shards
    if retriever == "bge-m3" and passages < 1_000_000:
        # IVF65536 needs millions of vectors to train; an exact flat index of fewer is small.
        retrievers[retriever]["index_factory"] = "Flat"
        retrievers[retriever].pop("nprobe", None)
    config["corpora"] = {corpus_name: {"source": "local", "path": _config_path(corpus)}}
    dataset: dict[str, Any] = {
        "source": "local",
        "queries": _config_path(queries),
        "task": task,
        "corpus": corpus_name,
        "retriever": retriever,
        "expected_queries": query_info["queries"],
    }
    if name in PAPER_DATASETS:
        dataset["paper_dataset"] = [name]
    config["datasets"] = {name: dataset}
    config["retrievers"] = retrievers
    if models == "demo":
        config["llms"] = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))["llms"]
    # Table 5's thinking methods run on one dataset (the paper: NQ), here the only one.
    config["judgments"] = {**paper["judgments"], "thinking_datasets": [name]}
    config["report"] = {**paper.get("report", {}), "figure1_dataset": name}
    human = query_info["human_passages"] / query_info["queries"]
    resources = dict(paper.get("resources") or {})
    resources["estimate"] = {
        **resources.get("estimate", {}),
        "passage_tokens": round(max(1.0, corpus_info["mean_words"] * TOKENS_PER_WORD)),
        "human_passages": round(human, 2),
    }
    config["resources"] = resources
    order = ["seed", "prompts", "verdict_synonyms", "store_dir", "corpora", "datasets", "retrievers"]
    return {**{k: config[k] for k in order if k in config}, **{k: v for k, v in config.items() if k not in order}}


def _config_path(path: Path) -> str:
    """A path as the workflow reads it, from the repository root: relative when inside it."""
    full = path.resolve()
    return str(full.relative_to(REPO)) if full.is_relative_to(REPO) else str(full)


def validate(config: dict[str, Any]) -> dict[str, Any]:
    """The config validated as the Snakefile validates it (defaults filled in, on a copy)."""
    from .workflow.checks import validated

    return validated(config)


def query_shards(full: Mapping[str, Any], name: str) -> dict[str, int]:
    """The query shards each model rule needs to fit resources.max_job_hours (``estimates``)."""
    from .workflow import estimates
    from .workflow.data_plan import DataPlan
    from .workflow.model_plan import ModelPlan

    plan = ModelPlan(DataPlan(full))
    needed = {}
    for rule in estimates.rules_of(plan, name):
        try:
            n = estimates.shards_needed(plan, name, rule)
        except ValueError:
            n = None
        if n and n > 1:
            needed[rule] = n
    return needed


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.0f} MiB"


def _hours(seconds: float, minute_digits: int = 0) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:,.{minute_digits}f} min"


def on_cpus(full: Mapping[str, Any]) -> bool:
    """Whether every LLM of the config runs on a CPU (the demo's models: `--models demo`)."""
    return all(not spec.get("gpu") for spec in full["llms"].values())


def report(
    full: Mapping[str, Any], name: str, corpus_info, query_info, here: Mapping[str, Any]
) -> tuple[list[str], list[str]]:
    """(lines of the cost report, warnings)."""
    lines, warnings = [], []
    passages = corpus_info["passages"]
    words = passages * corpus_info["mean_words"]
    ds = full["datasets"][name]
    retriever = ds["retriever"]
    memory = here["memory"]
    _, kind = cpu_kind(here.get("cpu_flags") or set())
    where = f"this machine: {here['cores']} cores ({kind.name}), {_gib(memory) if memory else 'unknown memory'}, " + (
        "an NVIDIA GPU" if here["gpu"] else "no GPU"
    )
    lines.append(f"What the run will cost ({where}):")
    # Encoding and the index.
    threads = int(full["retrievers"][retriever].get("encode_threads") or 1)
    if retriever == "minilm":
        encoding = encode_seconds(words, threads, kind)
        lines.append(
            f"  encoding {passages:,} passages with MiniLM on {threads} thread(s) "
            f"(retrievers.{retriever}.encode_threads): ~{_hours(encoding)}"
        )
    else:
        encoding = encode_seconds(words, 2, kind)
        shards = full["retrievers"][retriever]["shards"]
        lines.append(
            f"  encoding {passages:,} passages with {retriever} on GPUs: {shards} job(s) of one GPU "
            f"(no GPU rate is measured yet: docs/performance.md; MiniLM on 2 CPU threads would take "
            f"~{_hours(encoding)})"
        )
    dim = DIMENSIONS.get(retriever, 1024)
    factory = full["retrievers"][retriever].get("index_factory", "Flat")
    index_bytes = passages * dim * 4 if factory == "Flat" else passages * dim  # SQ8: one byte a dimension
    lines.append(f"  the FAISS index ({factory}, {dim} dimensions): ~{_gib(index_bytes)} in memory")
    bm25 = [r for r, spec in full["retrievers"].items() if spec.get("backend") == "bm25"]
    bm25_bytes = passages * BM25_BYTES_PER_PASSAGE
    if bm25:
        lines.append(
            f"  the BM25 run ({', '.join(bm25)}): building its index holds ~{_gib(bm25_bytes)} for "
            f'~{_hours(passages * BM25_S_PER_PASSAGE)} of one core (docs/performance.md, "BM25 at paper scale")'
        )
    # Model calls.
    cpu = on_cpus(full)
    estimate = cpu_run(full, corpus_info, here) if cpu else None
    per_llm: dict[str, dict[str, float]] = {}
    for row in model_cost(full, name):
        acc = per_llm.setdefault(row["llm"], {"calls": 0, "prompt_tokens": 0, "output_tokens": 0, "hours": 0.0})
        for key in ("calls", "prompt_tokens", "output_tokens"):
            acc[key] += row[key]
        acc["hours"] = None if acc["hours"] is None or row["hours"] is None else acc["hours"] + row["hours"]
    judged = full["judgments"].get("max_queries")
    queries = ds["expected_queries"]
    lines.append(
        f"  LLM calls on {queries:,} queries"
        + (f", {min(judged, queries):,} of them judged" if judged and judged < queries else "")
        + " (calls and tokens are upper bounds: outputs at their caps, nothing served by the store; "
        "llm_utility.workflow.estimates):"
    )
    for llm, acc in per_llm.items():
        spec = full["llms"][llm]
        if estimate is not None:
            time = f"~{_hours(estimate.parts[f'model calls: {llm}'])} of one core ({spec.get('threads') or 1} thread)"
        elif acc["hours"] is not None:
            time = (
                f"~{acc['hours']:,.1f} hours on {spec.get('gpu', 1)} GPU(s) at the configured "
                f"{spec['prefill_tokens_per_s']:,} prompt tokens/s (assumed, not measured)"
            )
        else:
            time = "no estimate (no throughputs configured)"
        lines.append(
            f"    {llm}: {acc['calls']:,.0f} calls, {acc['prompt_tokens'] / 1e6:,.2f}M prompt tokens, "
            f"{acc['output_tokens'] / 1e6:,.2f}M output tokens: {time}"
        )
    if estimate is not None:
        lines.append(
            f"  the whole run: ~{_hours(estimate.seconds, 1)} on this machine ({estimate.model_jobs} model jobs and "
            f"the other jobs, {estimate.side_by_side} side by side), from rates measured on CPUs of this kind: "
            f"{kind.source} (docs/data.md, 'What init's estimate rests on')"
        )
        demo_top_k = demo_cuts()[("top_k",)]
        if full["top_k"] > demo_top_k:
            lines.append(
                f"    (low: those rates are the demo's prompts of {demo_top_k} passages; top-{full['top_k']} prompts "
                "cost more per token, the attention ranking most)"
            )
    # What does not fit.
    fixes = []
    if memory and index_bytes > 0.5 * memory:
        warnings.append(f"the {factory} index (~{_gib(index_bytes)}) does not fit in this machine's memory")
        fixes.append(
            "an IVF index with 8-bit codes (retrievers.<name>.index_factory: IVF65536,SQ8, as config/paper.yaml)"
        )
    if bm25 and memory and bm25_bytes > 0.5 * memory:
        warnings.append(f"building the BM25 index (~{_gib(bm25_bytes)}) does not fit in this machine's memory")
        fixes.append(
            "no BM25 run (runs: {retrievers: []}), or a BM25 run made elsewhere (Pyserini) named in runs.files"
        )
    if not here["gpu"] and retriever != "minilm":
        warnings.append(f"{retriever} and the paper's LLMs need GPUs and this machine has none")
        fixes.append(
            "a GPU machine or cluster (profiles/paper, profiles/slurm, profiles/kubernetes), "
            "or `--models demo` for the CPU demo's models"
        )
    elif not here["gpu"] and encoding > 24 * 3600:
        warnings.append(f"encoding {passages:,} passages on this CPU takes ~{_hours(encoding)}")
        fixes.append(
            "the GPU retriever (bge-m3, `--models paper`) on a GPU machine, its encoding in shards "
            "(retrievers.<name>.shards: one GPU job each), or a smaller corpus"
        )
    if fixes:
        warnings.append("to fit: " + "; ".join(fixes))
    return lines, warnings


def render(
    config: Mapping[str, Any], args: argparse.Namespace, argv: list[str], shards: Mapping[str, int], cut: list[str]
) -> str:
    """The config as YAML, with comments where a user decides; its header records the command and
    what ``--budget`` cut."""
    text = yaml.safe_dump(dict(config), sort_keys=False, width=100, allow_unicode=True)
    text = re.sub(r"\n(?=[a-z_]+:)", "\n\n", text)  # a blank line between sections
    head = f"# Written by `python -m llm_utility.init {shlex.join(argv)}`.\n"
    if cut:
        head += f"# Cut to fit --budget {args.budget:g} minutes (its estimate on the machine that wrote it):\n"
        head += "".join(f"#   {line}\n" for line in cut)
        head += "# The rest is config/paper.yaml's settings (the re-ask, a BM25 run) on your corpus and queries.\n"
        head += "# Every key: docs/configuration.md.\n"
    else:
        head += (
            "# Your corpus and queries with config/paper.yaml's settings (top-k, every judgment method on every\n"
            "# query, the re-ask, a BM25 run): none of the CPU demo's cuts. Every key: docs/configuration.md.\n"
        )
    head += (
        "# Run from the repository: "
        f"snakemake --configfile {_config_path(args.out)} --cores all   (on GPUs: docs/cluster.md)\n\n"
    )
    if args.models == "paper":
        note = (
            "# The paper's four LLMs, on vLLM and GPUs (docs/cluster.md). On a machine without a GPU use the\n"
            "# CPU demo's two models instead: the `llms:` and `retrievers: minilm` of config/config.yaml\n"
            "# (or rerun with `--models demo`).\n"
        )
    else:
        note = (
            "# The CPU demo's two small LLMs (config/config.yaml); the paper's are in config/paper.yaml, for\n"
            "# GPUs (rerun with `--models paper`).\n"
        )
    text = text.replace("\n\nllms:\n", "\n\n" + note + "llms:\n", 1)
    if shards:
        text = text.replace(
            "    shards:\n      default: 1\n",
            "    # Query shards per model rule: the fewest with which each job's expected time fits\n"
            "    # resources.max_job_hours (python -m llm_utility.workflow.estimates on this file).\n"
            "    shards:\n      default: 1\n",
            1,
        )
    if args.name in PAPER_DATASETS:
        text = text.replace(
            "    paper_dataset:\n",
            f"    # '{args.name}' names the paper's {PAPER_DATASETS[args.name]}: "
            "findings.json tests the paper's claims\n"
            "    # about it on this dataset. Not that benchmark? Set `paper_dataset: []`, or rename it.\n"
            "    paper_dataset:\n",
            1,
        )
    return head + text


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog="python -m llm_utility.init",
        description="Write a config for your own corpus and queries (the paper's settings), check the files "
        "as the workflow will, and print what the run will cost on this machine.",
    )
    parser.add_argument(
        "--corpus", type=Path, required=True, help="passages, DPR layout: id<TAB>text<TAB>title (docs/data.md)"
    )
    parser.add_argument(
        "--queries", type=Path, required=True, help="queries, JSONL: id, question, answers, human_pids (docs/data.md)"
    )
    parser.add_argument(
        "--task",
        choices=["qa", "fact"],
        default="qa",
        help="task of queries that name none (fact: claims, SUPPORTS/REFUTES)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("config/mine.yaml"), help="the config to write (default: config/mine.yaml)"
    )
    parser.add_argument("--name", help="the dataset's name (default: from the queries file's name)")
    parser.add_argument("--corpus-name", help="the corpus's name (default: from the corpus file's name)")
    parser.add_argument(
        "--models",
        choices=["paper", "demo"],
        default="paper",
        help="paper: config/paper.yaml's LLMs and BGE-M3 (GPUs; default); demo: the CPU demo's",
    )
    parser.add_argument(
        "--limit", type=_positive(int), metavar="N", help="only the first N queries (datasets.<name>.limit)"
    )
    parser.add_argument(
        "--budget",
        type=_positive(float),
        metavar="MINUTES",
        help="cut the run until its estimate on this machine fits: fewer queries, fewer of them judged, the "
        "demo's methods (CPU models: --models demo)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite --out")
    args = parser.parse_args(argv)
    if args.budget and args.models != "demo":
        parser.error(
            "--budget sizes a run from rates measured on CPUs, with the demo's models: add --models demo "
            "(the paper's models run on GPUs, where no rate is measured yet; size that run with --limit)"
        )
    generic = [
        f"{flag} for the {what} '{_slug(path.name.split('.')[0])}'"
        for flag, what, path, given in (
            ("--name", "dataset", args.queries, args.name),
            ("--corpus-name", "corpus", args.corpus, args.corpus_name),
        )
        if not given and _slug(path.name.split(".")[0]) in GENERIC_NAMES
    ]
    args.name = _slug(args.name or args.queries.name.split(".")[0])
    corpus_name = _slug(args.corpus_name or args.corpus.name.split(".")[0])
    if corpus_name == args.name:
        corpus_name = f"{corpus_name}-corpus"
    if args.out.exists() and not args.force:
        parser.error(f"{args.out} exists (add --force to overwrite it)")
    try:
        corpus_info = check_corpus(args.corpus)
        print(
            f"{args.corpus}: {corpus_info['passages']:,} passages, ids unique, "
            f"{corpus_info['mean_words']:.0f} words each on average"
        )
        query_info = check_queries(args.queries, corpus_info["pids"], args.task)
    except (DataFormatError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    tasks = ", ".join(f"{n:,} {t}" for t, n in query_info["tasks"].items())
    print(
        f"{args.queries}: {query_info['queries']:,} queries ({tasks}), {query_info['human_passages']:,} human "
        f"passages on {query_info['with_human']:,} of them, every one in the corpus"
    )
    if query_info["with_human"] < query_info["queries"]:
        print("  note: a query without human passages has U = C (its Human column and human perplexities are empty)")
    if generic:
        print(
            "  note: the data are named after their files, and these names say little in the tables, figures "
            f"and paths that carry them: name them with {' and '.join(generic)}"
        )
    if args.name in PAPER_DATASETS:
        print(
            f"  note: the dataset name '{args.name}' means the paper's {PAPER_DATASETS[args.name]}: findings.json "
            "tests the paper's claims about it on these queries (the written file says how to opt out)"
        )
    config = build_config(
        args.corpus, args.queries, args.name, corpus_name, args.task, args.models, corpus_info, query_info
    )
    total = query_info["queries"]
    queries = min(args.limit or total, total)
    if queries < total:
        config["datasets"][args.name].update(limit=queries, expected_queries=queries)
    here = machine()
    cut_lines: list[str] = []
    if args.budget:
        whole = config
        cut, config, estimate = fit(whole, args.name, queries, args.budget * 60, corpus_info, here)
        if cut is None:
            parts = ", ".join(
                f"{what} {_hours(s)}" for what, s in sorted(estimate.parts.items(), key=lambda kv: -kv[1])[:3]
            )
            print(
                f"error: no run fits --budget {args.budget:g}: one query, judged, with the demo's methods is "
                f"estimated at ~{_hours(estimate.seconds)} on this machine (job-seconds: {parts}); raise the "
                "budget, or use a smaller corpus",
                file=sys.stderr,
            )
            return 1
        cut_lines = describe_cut(cut, queries, total, args.name, whole)
    full = validate(config)
    shards = query_shards(full, args.name)
    if shards:
        config["datasets"][args.name]["shards"] = {"default": 1, **shards}
        full = validate(config)
    lines, warnings = report(full, args.name, corpus_info, query_info, here)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(config, args, argv, shards, cut_lines), encoding="utf-8")
    print(
        f"wrote {args.out}: dataset '{args.name}' on corpus '{corpus_name}', retriever "
        f"{config['datasets'][args.name]['retriever']}, top-{config['top_k']}, LLMs {', '.join(config['llms'])}"
    )
    print("\n".join(lines))
    if args.budget:
        if cut_lines:
            print(f"cut to fit --budget {args.budget:g} minutes:")
            print("\n".join(f"  {line}" for line in cut_lines))
        else:
            print(f"fits --budget {args.budget:g} minutes without a cut")
    for warning in warnings:
        print(f"WARNING: {warning}")
    print(
        "next, from the repository: "
        f"snakemake --configfile {_config_path(args.out)} --cores all -n   (the jobs it would run)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
