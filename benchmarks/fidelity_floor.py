"""Benchmark how far each CPU arithmetic of the transformers backend is from float32, against plain
bfloat16: the fidelity floor that ``dtype: auto`` is held to.

This project measures utility *for a given LLM*, so an arithmetic that changes the LLM's answers
changes what is measured. A GPU run of the same weights computes in bfloat16 (vLLM's default), and
that is the accepted distance from float32. An arithmetic of the project's CPU engine meets the floor
when it is, within a stated slack, no further from float32 than plain bfloat16 is, on the same calls.

Per demo model (``--models``, default smollm2-135m and gemma3-270m):

Prompts: real demo calls, drawn deterministically from a finished demo's generation store
  (``--store``, default resources/cache/generation of this checkout; ``<store>/<llm>/*.sqlite``, shards
  still being written, ``*.open.sqlite``, are skipped):
  - ``--generate N`` generation calls (default 48), stratified over the stages (the shard name's
    prefix before ``+``: answer_candidates, answer_gold, answer_judgments, answer_reask, answer_run,
    judge): in rounds, one call from each stage in turn, each stage's calls in the order of the sha256
    of their prompt. Each call keeps its own limits, read from the row's ``params`` (the generation
    store's key: ``max_new_tokens``, 24 for answers, 8 and 64 for the judge's pointwise and listwise
    prompts; ``stop``, ``["\\n"]``), so the judge's prompts are decoded as the demo decoded them.
  - ``--score M`` score calls (default 24), stratified the same way over the passages' perplexities
    (an empty prompt) and the likelihood ranking's pseudo-answers (a prompt), in the order of the
    sha256 of prompt and target.
  A prompt in the store is the rendered text the model saw; the same prompt with the same limits in
  several shards counts once.

Reference: float32, computed directly with plain transformers
  (``AutoModelForCausalLM.from_pretrained(resources/models/<llm>, dtype=torch.float32)``, default
  attention), one prompt at a time, one thread. The rendered prompt is tokenized as the project's
  backend does (``Generator.encode``, written out in ``encode``: the tokenizer's special tokens unless
  the text already starts with the BOS token), a target on its own without special tokens.
  - Greedy: the largest logit at each step, from a forward pass over the whole prompt and then one
    token at a time on transformers' cache, until an EOS token (the model's generation config), the
    call's ``max_new_tokens``, or a stop string in the new text (past leading whitespace); the output
    is the new tokens' text cut as the project cuts it (``cut_answer``, written out in ``cut``).
  - Scoring: log P(token | tokens before it) for every target token that has a token before it: one
    unpadded forward pass over prompt and target, log-softmax in float32, gather
    (tests/test_independent_checks.py's ``direct_target_logprobs``, with only the needed positions'
    logits kept).
Anchor: plain bfloat16, directly: the same float32 model ``.to(torch.bfloat16)``, the same procedure
  (its logits are bfloat16's, as a GPU's are; log-softmax in float32).
Candidates: the project's backend in each arithmetic this CPU offers (``--dtypes``, default float32,
  bfloat16, and int8 where ``cpu_arithmetic.int8_supported``), loaded as the demo loads it
  (``load_generator`` with the demo config's spec and that ``dtype``, one thread, no model host):
  ``generate(prompts, max_new_tokens, stop)`` on the calls grouped by their limits, as a job batches
  them, and ``score(pairs)``.

Metrics, per model and arithmetic, against the direct float32:
  - greedy outputs equal: of the N generation calls, how many give float32's output exactly, and the
    discordant calls against the anchor (this one differs from float32 where bfloat16 does not, and
    the other way round), the pairs that decide a paired comparison;
  - score calls: per-token |delta log-prob|, median, 95th percentile and max (over all scored tokens);
  - continuations: float32's greedy continuation of every generation call (the raw text of its new
    tokens, stop string included, before the cut) scored after its prompt in each arithmetic (direct
    for plain float32 and bfloat16, ``score()`` for the project's) against direct float32's scores of
    the same: per-token |delta log-prob| median, 95th percentile, max. These are the decisions greedy
    decoding takes, each from float32's own context;
  - seconds: the arithmetic's model calls (generations, score calls and continuations; the direct
    ones one at a time), and its load;
  - the CPU's model name and the flags that decide the arithmetic (``cpu_arithmetic.cpu_flags``).

The floor: an arithmetic meets it when, on the same calls,
  - its greedy agreement >= plain bfloat16's minus ``--slack-calls`` calls (default 2), and
  - its median per-token |delta| <= plain bfloat16's x (1 + ``--slack-median``) (default 0.25), for
    the score calls and for the continuations, each.
Why these slacks: both arithmetics are compared with float32 on the same N calls, so what separates
their greedy counts is the discordant calls alone. An arithmetic exactly as faithful as bfloat16 that
differs from float32 on ~4 of 48 calls, other ones than bfloat16's, falls short of bfloat16's count
by 2 or more calls about 3 times in 10 and by 3 or more about one time in six (the difference of two
Poisson counts of mean 4): a slack of one call (2 points at N = 48) would often reject it, two calls
(~4 points) rarely. The gap this floor is for stays far outside it: on the AMX Xeon of
benchmarks/results/fidelity_floor.csv (2026-12-05), int8 agreed with float32 on 31 and 33 of 48
calls, plain bfloat16 on 41 and 44 (SmolLM2, Gemma 3), and the project's bfloat16, 7 and 3 calls
discordant with plain bfloat16's, on 42 and 47. The medians are over ~500-1,100 tokens and steadier:
there the project's bfloat16 was within 6% of plain bfloat16's, int8 3.2-3.6x (score calls) and
3.6-3.9x (continuations), so 25% separates "as faithful as bfloat16" from "further" with room on both
sides. ``--slack-calls`` and ``--slack-median`` set them.

Output: a markdown table (date, commit, CPU, flags, the command; per model and arithmetic: greedy
equal, the medians, 95th percentiles and maxima, seconds, the verdict), one row per model and
arithmetic appended to ``--csv`` (default benchmarks/results/fidelity_floor.csv, with date, commit,
CPU, flags and command), and with ``--json PATH`` every number and every call's outputs.

    .venv/bin/python benchmarks/fidelity_floor.py [--models smollm2-135m gemma3-270m]
        [--generate 48] [--score 24] [--dtypes float32 bfloat16 int8] [--slack-calls 2]
        [--slack-median 0.25] [--store DIR] [--models-dir DIR] [--config config/config.yaml]
        [--csv PATH] [--json PATH] [--emulate avx2|avx512]

``--emulate`` runs it again in a subprocess with torch's kernels capped as on another CPU
(``benchmarks/cpu_engine.py``'s ``EMULATE``: ``avx2``, an AVX2-only CPU; ``avx512``, AVX-512
BF16/VNNI without AMX); the direct computations run under the same caps. The demo models must be
materialized (`snakemake --cores all resources/models/<llm>/manifest.json`) and a demo must have
filled the store (`make demo`). Nothing is asserted: it measures, prints and appends.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import gc
import hashlib
import inspect
import json
import math
import os
import platform
import shlex
import sqlite3
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

GENERATE_CALLS, SCORE_CALLS = 48, 24
SLACK_CALLS, SLACK_MEDIAN = 2, 0.25
REFERENCE, ANCHOR = "direct float32", "direct bfloat16"
# benchmarks/results/README.md's columns every file has first (kernels: the --emulate cap).
CSV_FIELDS = [
    "date",
    "date_source",
    "commit",
    "cpu",
    "flags",
    "kernels",
    "recorded_in",
    "command",
    "llm",
    "arithmetic",
    "generate_calls",
    "greedy_equal",
    "greedy_share",
    "score_tokens",
    "score_median",
    "score_p95",
    "score_max",
    "continuation_tokens",
    "continuation_median",
    "continuation_p95",
    "continuation_max",
    "seconds",
    "load_seconds",
    "slack_calls",
    "slack_median",
    "verdict",
]


# --- the calls ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One stored model call: a generation (its limits) or a score (its target)."""

    kind: str  # "generate" or "score"
    stage: str  # the shard name's prefix before "+"
    prompt: str  # rendered, as the model saw it
    target: str = ""
    max_new_tokens: int = 0
    stop: tuple[str, ...] = ()


def read_store(folder: Path) -> list[Call]:
    """Every distinct generation and score call in one LLM's store folder, shard by shard in name order."""
    shards = [s for s in sorted(folder.glob("*.sqlite")) if not s.name.endswith(".open.sqlite")]
    if not shards:
        raise SystemExit(f"{folder}: no generation-store shards (*.sqlite); run the demo first (make demo)")
    calls: dict[tuple, Call] = {}
    for shard in shards:
        stage = shard.name.split("+", 1)[0]
        try:
            with contextlib.closing(sqlite3.connect(f"file:{shard}?immutable=1", uri=True)) as db:
                rows = db.execute(
                    "SELECT kind, prompt, target, params FROM calls WHERE kind IN ('generate', 'score')"
                ).fetchall()
        except sqlite3.DatabaseError as error:
            raise SystemExit(f"{shard}: not a readable generation-store shard ({error})") from error
        for kind, prompt, target, params in rows:
            if kind == "score":
                call = Call("score", stage, prompt, target)
            else:
                limits = json.loads(params)
                if "max_new_tokens" not in limits:
                    raise SystemExit(f"{shard}: a generate row's params have no max_new_tokens: {params}")
                call = Call("generate", stage, prompt, "", int(limits["max_new_tokens"]), tuple(limits.get("stop", [])))
            calls.setdefault((kind, prompt, target, call.max_new_tokens, call.stop), call)
    return list(calls.values())


def sha256(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


def stratified(
    items: Sequence[Call], stratum: Callable[[Call], str], order: Callable[[Call], Any], n: int
) -> list[Call]:
    """``n`` items in rounds: one from each stratum in turn (strata by name), each stratum's items in
    ``order``; a stratum with fewer items leaves its turns to the others."""
    groups: dict[str, list[Call]] = {}
    for item in items:
        groups.setdefault(stratum(item), []).append(item)
    queues = [sorted(groups[name], key=order) for name in sorted(groups)]
    picked: list[Call] = []
    for rank in range(max((len(q) for q in queues), default=0)):
        picked += [q[rank] for q in queues if rank < len(q)]
    return picked[:n]


def draw_calls(calls: Sequence[Call], n_generate: int, n_score: int) -> tuple[list[Call], list[Call]]:
    """The generation calls stratified over stages, and the score calls over perplexities and likelihoods."""
    generations = stratified(
        [c for c in calls if c.kind == "generate"],
        lambda c: c.stage,
        lambda c: (sha256(c.prompt), c.max_new_tokens, c.stop),
        n_generate,
    )
    scores = stratified(
        [c for c in calls if c.kind == "score"],
        lambda c: "perplexity" if c.prompt == "" else "likelihood",
        lambda c: sha256(c.prompt, c.target),
        n_score,
    )
    return generations, scores


# --- the direct computations (plain transformers, one prompt at a time) ---------------------------


def encode(tokenizer: Any, prompt: str) -> list[int]:
    """A rendered prompt's ids as the project's backend takes them: the tokenizer's special tokens,
    unless the text already starts with the BOS token (a chat template writes it)."""
    bos = getattr(tokenizer, "bos_token", None)
    return tokenizer(prompt, add_special_tokens=not (bos and prompt.startswith(bos)))["input_ids"]


def cut(text: str, stop: Sequence[str]) -> str:
    """An answer in a raw continuation: leading whitespace dropped, cut at the earliest stop string, stripped."""
    text = text.lstrip()
    ends = [text.find(s) for s in stop if s and s in text]
    return text[: min(ends, default=len(text))].strip()


def direct_greedy(model: Any, tokenizer: Any, prompt: str, max_new_tokens: int, stop: Sequence[str]) -> list[int]:
    """The new token ids of greedy decoding: the largest logit each step, until an EOS token, the limit,
    or a stop string in the new text past its leading whitespace."""
    import torch

    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list | tuple) else [] if eos is None else [eos])
    stop = [s for s in stop if s]
    # transformers names the cache argument and output ``cache`` from 5.24, ``past_key_values`` before.
    keyword = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"
    new: list[int] = []
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([encode(tokenizer, prompt)]), use_cache=True, logits_to_keep=1)
        while len(new) < max_new_tokens:
            token = int(out.logits[0, -1].argmax())
            if token in eos:
                break
            new.append(token)
            if stop and any(s in tokenizer.decode(new, skip_special_tokens=True).lstrip() for s in stop):
                break
            cache = out["cache"] if "cache" in out else out["past_key_values"]
            out = model(input_ids=torch.tensor([[token]]), use_cache=True, logits_to_keep=1, **{keyword: cache})
    return new


def direct_target_logprobs(model: Any, prompt_ids: list[int], target_ids: list[int]) -> list[float]:
    """log P(token j | tokens < j) for every target position j >= 1 of prompt_ids + target_ids: one
    unpadded forward pass, log-softmax in float32, gather."""
    import torch

    ids = prompt_ids + target_ids
    first = max(len(prompt_ids), 1)
    if len(ids) <= first:
        return []
    keep = len(ids) - first + 1  # positions first-1 .. len-1; the last predicts nothing here
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids]), logits_to_keep=keep).logits[0, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return logprobs.gather(-1, torch.tensor(ids[first:])[:, None])[:, 0].tolist()


@dataclass
class Run:
    """One arithmetic's results on the drawn calls."""

    name: str
    outputs: list[str]  # each generation call's output (cut)
    scores: list[list[float]]  # each score call's per-token log-probs
    continuations: list[list[float]]  # float32's continuation of each generation call, scored
    seconds: float
    load_seconds: float


def run_direct(
    name: str,
    model: Any,
    tokenizer: Any,
    generations: Sequence[Call],
    scores: Sequence[Call],
    continuations: Sequence[str] | None,
    load_seconds: float,
) -> tuple[Run, list[str]]:
    """One direct arithmetic; the raw continuations it decoded (its own, when ``continuations`` is None)."""
    started = time.perf_counter()
    raw = [
        tokenizer.decode(direct_greedy(model, tokenizer, c.prompt, c.max_new_tokens, c.stop), skip_special_tokens=True)
        for c in generations
    ]
    outputs = [cut(text, c.stop) for text, c in zip(raw, generations, strict=True)]
    continuations = raw if continuations is None else continuations

    def target_ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    scored = [direct_target_logprobs(model, encode(tokenizer, c.prompt), target_ids(c.target)) for c in scores]
    continued = [
        direct_target_logprobs(model, encode(tokenizer, c.prompt), target_ids(t))
        for c, t in zip(generations, continuations, strict=True)
    ]
    return Run(name, outputs, scored, continued, time.perf_counter() - started, load_seconds), raw


def run_project(
    manifest: Path,
    spec: dict,
    dtype: str,
    generations: Sequence[Call],
    scores: Sequence[Call],
    continuations: Sequence[str],
) -> Run:
    """The project's backend in ``dtype``: its generate on the calls grouped by their limits, its score."""
    from llm_utility.generation import load_generator

    started = time.perf_counter()
    gen = load_generator(manifest, {**spec, "dtype": dtype, "keep_loaded": None}, threads=1)
    gen.model  # noqa: B018 - loads (and converts) the weights now, outside the calls' seconds
    loaded = time.perf_counter()
    outputs = [""] * len(generations)
    groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for i, c in enumerate(generations):
        groups.setdefault((c.max_new_tokens, c.stop), []).append(i)
    for (limit, stop), rows in sorted(groups.items()):
        for row, text in zip(rows, gen.generate([generations[r].prompt for r in rows], limit, list(stop)), strict=True):
            outputs[row] = text
    scored = gen.score([(c.prompt, c.target) for c in scores])
    continued = gen.score([(c.prompt, t) for c, t in zip(generations, continuations, strict=True)])
    run = Run(f"project {gen.dtype}", outputs, scored, continued, time.perf_counter() - loaded, loaded - started)
    gen.close()
    return run


# --- the metrics and the floor --------------------------------------------------------------------


def abs_deltas(reference: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]]) -> list[float]:
    """Per-token |delta| over calls scored on the same tokens."""
    deltas: list[float] = []
    for i, (a, b) in enumerate(zip(reference, candidate, strict=True)):
        if len(a) != len(b):
            raise RuntimeError(f"call {i}: {len(a)} tokens scored in float32, {len(b)} in the candidate")
        deltas += [abs(x - y) for x, y in zip(a, b)]
    return deltas


def summary(deltas: Sequence[float]) -> dict[str, float | int | None]:
    """Tokens, median, 95th percentile (linear between order statistics) and max of |delta|s."""
    if not deltas:
        return {"tokens": 0, "median": None, "p95": None, "max": None}
    ordered = sorted(deltas)
    rank = 0.95 * (len(ordered) - 1)
    low, high = ordered[math.floor(rank)], ordered[math.ceil(rank)]
    return {
        "tokens": len(ordered),
        "median": statistics.median(ordered),
        "p95": low + (high - low) * (rank - math.floor(rank)),
        "max": ordered[-1],
    }


def compare(reference: Run, candidate: Run, anchor: Run | None) -> dict[str, Any]:
    """A candidate's distance from the direct float32 on the same calls."""
    equal = [a == b for a, b in zip(reference.outputs, candidate.outputs, strict=True)]
    row: dict[str, Any] = {
        "arithmetic": candidate.name,
        "generate_calls": len(equal),
        "greedy_equal": sum(equal),
        "greedy_share": sum(equal) / len(equal) if equal else None,
        "score": summary(abs_deltas(reference.scores, candidate.scores)),
        "continuation": summary(abs_deltas(reference.continuations, candidate.continuations)),
        "seconds": candidate.seconds,
        "load_seconds": candidate.load_seconds,
    }
    if anchor is not None:
        anchored = [a == b for a, b in zip(reference.outputs, anchor.outputs, strict=True)]
        row["only_this_differs"] = sum(a and not e for a, e in zip(anchored, equal))
        row["only_anchor_differs"] = sum(e and not a for a, e in zip(anchored, equal))
    return row


def floor_verdict(candidate: dict, anchor: dict, slack_calls: int, slack_median: float) -> tuple[bool, list[str]]:
    """Whether ``candidate`` meets the fidelity floor set by ``anchor`` (plain bfloat16), and the
    reasons it does not: greedy agreement at least the anchor's less ``slack_calls`` calls, and each
    median per-token |delta| (score calls, continuations) at most the anchor's x (1 + ``slack_median``).
    A median that either side lacks (no such calls) is not compared."""
    reasons = []
    floor = anchor["greedy_equal"] - slack_calls
    if candidate["greedy_equal"] < floor:
        n, mine, theirs = candidate["generate_calls"], candidate["greedy_equal"], anchor["greedy_equal"]
        reasons.append(f"greedy {mine}/{n} < bfloat16's {theirs}/{n} - {slack_calls}")
    for part in ("score", "continuation"):
        mine, theirs = candidate[part]["median"], anchor[part]["median"]
        if mine is not None and theirs is not None and mine > theirs * (1 + slack_median):
            reasons.append(f"{part} median {mine:.4f} > bfloat16's {theirs:.4f} x {1 + slack_median:g}")
    return not reasons, reasons


# --- one model ------------------------------------------------------------------------------------


def measure_model(llm: str, spec: dict, args: argparse.Namespace, dtypes: Sequence[str]) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    generations, scores = draw_calls(read_store(args.store / llm), args.generate, args.score)
    stages = sorted({c.stage for c in generations})
    per_stage = ", ".join(f"{s} {sum(c.stage == s for c in generations)}" for s in stages)
    print(
        f"{llm}: {len(generations)} generation calls ({per_stage}), "
        f"{len(scores)} score calls ({sum(c.prompt == '' for c in scores)} perplexities)",
        flush=True,
    )
    manifest = args.models_dir / llm / "manifest.json"
    if not manifest.is_file():
        raise SystemExit(f"{manifest} is missing: snakemake --cores all resources/models/{llm}/manifest.json")
    folder = manifest.parent
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    load = time.perf_counter() - started
    reference, continuations = run_direct(REFERENCE, model, tokenizer, generations, scores, None, load)
    print(f"  {REFERENCE}: {reference.seconds:.0f} s", flush=True)
    started = time.perf_counter()
    model = model.to(torch.bfloat16)
    anchor, _ = run_direct(ANCHOR, model, tokenizer, generations, scores, continuations, time.perf_counter() - started)
    print(f"  {ANCHOR}: {anchor.seconds:.0f} s", flush=True)
    del model
    gc.collect()
    runs = [reference, anchor]
    for dtype in dtypes:
        runs.append(run_project(manifest, spec, dtype, generations, scores, continuations))
        print(f"  {runs[-1].name}: {runs[-1].seconds:.0f} s", flush=True)
        gc.collect()
    rows = [compare(reference, run, anchor if run not in (reference, anchor) else None) for run in runs]
    anchor_row = rows[1]
    for row in rows:
        if row["arithmetic"] == REFERENCE:
            row["verdict"] = "reference"
        elif row["arithmetic"] == ANCHOR:
            row["verdict"] = "anchor"
        else:
            meets, reasons = floor_verdict(row, anchor_row, args.slack_calls, args.slack_median)
            row["verdict"] = "meets the floor" if meets else "below the floor: " + "; ".join(reasons)
    calls = [
        {
            "stage": c.stage,
            "prompt_sha256": sha256(c.prompt),
            "max_new_tokens": c.max_new_tokens,
            "stop": list(c.stop),
            "continuation": text,
            "outputs": {run.name: run.outputs[i] for run in runs},
        }
        for i, (c, text) in enumerate(zip(generations, continuations, strict=True))
    ]
    return {"llm": llm, "rows": rows, "calls": calls}


# --- the report -----------------------------------------------------------------------------------


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def commit() -> str:
    """This checkout's commit, ``-dirty`` when the code that computes (src/, this script) has changes."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown"
    changed = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "src", "benchmarks/fidelity_floor.py"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return head.stdout.strip() + ("-dirty" if changed else "")


def _num(value: float | None) -> str:
    """4 decimals; values below 0.001 (the project's float32 against the direct one) in 2 significant digits."""
    if value is None:
        return "-"
    return f"{value:.4f}" if value == 0 or value >= 1e-3 else f"{value:.1e}"


def markdown(report: dict) -> str:
    lines = [
        f"{report['date']}, commit {report['commit']}, {report['cpu']}"
        + (f" (emulating {report['emulate']})" if report["emulate"] else ""),
        f"CPU flags: {report['flags']}",
        f"`{report['command']}`; floor: greedy >= bfloat16's - {report['slack_calls']} calls, "
        f"medians <= bfloat16's x {1 + report['slack_median']:g}",
        "",
        "| model | arithmetic | greedy = float32 | discordant with bfloat16 (only this ≠, only bf16 ≠) "
        "| score calls: median / p95 / max \\|Δ log-prob\\| (tokens) "
        "| continuations: median / p95 / max (tokens) | seconds (load) | verdict |",
        "|---|---|--:|--:|--:|--:|--:|---|",
    ]
    for model in report["models"]:
        for r in model["rows"]:
            parts = []
            for part in ("score", "continuation"):
                s = r[part]
                parts.append(f"{_num(s['median'])} / {_num(s['p95'])} / {_num(s['max'])} ({s['tokens']})")
            discordant = f"{r['only_this_differs']}, {r['only_anchor_differs']}" if "only_this_differs" in r else "-"
            lines.append(
                f"| {model['llm']} | {r['arithmetic']} | {r['greedy_equal']}/{r['generate_calls']} "
                f"({100 * (r['greedy_share'] or 0):.0f}%) | {discordant} | {parts[0]} | {parts[1]} "
                f"| {r['seconds']:.0f} ({r['load_seconds']:.0f}) | {r['verdict']} |"
            )
    return "\n".join(lines)


# --emulate as benchmarks/results/README.md names a kernel cap.
KERNEL_CAPS = {"": "", "avx2": "AVX2", "avx512": "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16"}


def append_csv(path: Path, report: dict) -> None:
    """One row per model and arithmetic; a file written with other columns is an error, not mixed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and path.stat().st_size:
        with path.open(newline="") as f:
            header = next(csv.reader(f), [])
        if header != CSV_FIELDS:
            raise SystemExit(f"{path}: its header {header} is not this script's columns {CSV_FIELDS}; move it aside")
        new = False
    else:
        new = True
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, CSV_FIELDS)
        if new:
            writer.writeheader()
        for model in report["models"]:
            for r in model["rows"]:
                flat = {f"{part}_{k}": r[part][k] for part in ("score", "continuation") for k in r[part]}
                writer.writerow(
                    {
                        **{k: report[k] for k in ("date", "commit", "cpu", "command")},
                        "date_source": "measured",
                        # the flags the results' README lists (fma, which every x86 CPU here has, left out)
                        "flags": " ".join(f for f in report["flags"].split() if f != "fma"),
                        "kernels": KERNEL_CAPS[report["emulate"] or ""],
                        "recorded_in": "",
                        **{k: r[k] for k in ("arithmetic", "generate_calls", "greedy_equal", "verdict")},
                        **{k: v for k, v in flat.items() if k in CSV_FIELDS},
                        "llm": model["llm"],
                        "greedy_share": _num(r["greedy_share"]),
                        "seconds": f"{r['seconds']:.1f}",
                        "load_seconds": f"{r['load_seconds']:.1f}",
                        "slack_calls": report["slack_calls"],
                        "slack_median": report["slack_median"],
                    }
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--generate", type=int, default=GENERATE_CALLS, help="generation calls per model")
    parser.add_argument("--score", type=int, default=SCORE_CALLS, help="score calls per model")
    parser.add_argument("--dtypes", nargs="+", help="the project's arithmetics (default: float32 bfloat16 int8)")
    parser.add_argument("--slack-calls", type=int, default=SLACK_CALLS)
    parser.add_argument("--slack-median", type=float, default=SLACK_MEDIAN)
    parser.add_argument("--store", type=Path, default=REPO / "resources" / "cache" / "generation")
    parser.add_argument("--models-dir", type=Path, default=REPO / "resources" / "models")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    parser.add_argument("--csv", type=Path, default=REPO / "benchmarks" / "results" / "fidelity_floor.csv")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--emulate", choices=["avx2", "avx512"], help="cap torch's kernels as on that CPU")
    args = parser.parse_args()
    command = shlex.join(["python", "benchmarks/fidelity_floor.py", *sys.argv[1:]])
    if args.emulate:
        sys.path.insert(0, str(REPO / "benchmarks"))
        from cpu_engine import EMULATE

        caps = EMULATE[args.emulate]
        if any(os.environ.get(k) != v for k, v in caps.items()):
            # The caps are read when torch loads its kernels: run again in a process that starts with them.
            done = subprocess.run([sys.executable, __file__, *sys.argv[1:]], env={**os.environ, **caps})
            sys.exit(done.returncode)

    import torch
    import transformers
    import yaml

    from llm_utility.generation import cpu_arithmetic

    warnings.filterwarnings("ignore")
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    config = yaml.safe_load(args.config.read_text())
    llms = config.get("llms") or {}
    for llm in args.models:
        if llm not in llms:
            raise SystemExit(f"{args.config}: llms.{llm} is not there (it has {sorted(llms)})")
    flags = " ".join(name for name, on in cpu_arithmetic.cpu_flags().items() if on) or "none reported"
    dtypes = args.dtypes or ["float32", "bfloat16", *(["int8"] if cpu_arithmetic.int8_supported() else [])]
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "commit": commit(),
        "cpu": cpu_model(),
        "flags": flags,
        "emulate": args.emulate or "",
        "command": command,
        "auto": cpu_arithmetic.resolve_dtype("auto", cuda=False),
        "slack_calls": args.slack_calls,
        "slack_median": args.slack_median,
        "models": [],
    }
    print(f"CPU: {report['cpu']}; flags: {flags}; dtype auto picks {report['auto']} here", flush=True)
    for llm in args.models:
        report["models"].append(measure_model(llm, llms[llm], args, dtypes))
    print()
    print(markdown(report))
    append_csv(args.csv, report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
