"""What every job that calls a model shares: loading the model and its store, truncating passages,
checking that prompts fit, and logging what the store made and served."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..method.prompts import Passage

log = logging.getLogger("llm_utility")


@contextlib.contextmanager
def model_session(
    *,
    manifest: str,
    spec: Mapping[str, Any],
    store: str | Path,
    job: str,
    threads: int | None = None,
    log: logging.Logger = log,
) -> Iterator[tuple[Any, Any]]:
    """(generator, store) for one job: the generator loads its weights only on its first call (a
    job whose calls the store holds never pays for them); on exit the store's shard is sealed, the
    model freed (before the caller's GPU lease ends), and one ``store_stats`` JSON line logged, which
    benchmarks and the cost table add up across the DAG."""
    from ..generation import GenerationStore, load_generator
    from ..gpu import check_visible_gpus

    check_visible_gpus(int(spec.get("gpu") or 0), f"{job} (its LLM's gpu setting)")
    started = time.perf_counter()
    generator = load_generator(manifest, spec, threads=threads)
    log.info(
        "%s: backend %s, dtype %s (llms.%s.dtype: %s)",
        generator.slug,
        generator.backend,
        generator.dtype,
        generator.slug,
        spec.get("dtype"),
    )
    try:
        with GenerationStore(store, job=job) as calls:
            yield generator, calls
            log.info("generation store: %s", calls.summary())
            stats = {
                "llm": generator.slug,
                "job": job,
                "backend": generator.backend,
                "dtype": generator.dtype,
                "calls": calls.stats,
            }
            if calls.sections:
                stats["methods"] = calls.sections
            log.info("store_stats %s", json.dumps(stats))
    finally:
        generator.close()
        log.info("%s took %.1f s", job, time.perf_counter() - started)


def truncate_passages(passages: Mapping[str, Passage], generator: Any, max_tokens: int | None) -> dict[str, Passage]:
    """Each passage's text cut to its first ``max_tokens`` tokens of the model's tokenizer (None: as is).

    The cut text is what the prompt holds, so the truncation is part of every store key."""
    if not max_tokens:
        return dict(passages)
    tokenizer = generator.tokenizer
    out = {}
    for pid, p in passages.items():
        ids = tokenizer(p.text, add_special_tokens=False)["input_ids"]
        text = p.text if len(ids) <= max_tokens else tokenizer.decode(ids[:max_tokens]).rstrip()
        out[pid] = Passage(p.pid, p.title, text)
    return out


def empty_share(outputs: list[str]) -> float:
    """Share of empty outputs (a model that says nothing must be visible)."""
    return sum(not o.strip() for o in outputs) / len(outputs) if outputs else 0.0
