"""Seconds to compute findings.json and Table 1's intervals on synthetic inputs of a given size,
printed as one JSON line (nothing asserted).

Synthetic answers (0/1 per query and context), gold sets, known flags, perplexities, judgments and
rankings for D datasets x L LLMs x Q queries with k candidates, shaped like the workflow's files.

    .venv/bin/python benchmarks/findings_speed.py --datasets 6 --llms 4 --queries 3000 --resamples 2000
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import polars as pl

from llm_utility.report.analysis import TABLE1_CONTEXTS, table1_intervals
from llm_utility.report.findings import FindingInputs, Resampling, all_findings


def synthetic(n_datasets: int, n_llms: int, n_queries: int, k: int, seed: int = 0) -> FindingInputs:
    rng = np.random.default_rng(seed)
    llms = [f"llm{i}" for i in range(n_llms)]
    datasets = [f"ds{i}" for i in range(n_datasets)]
    qids = [f"q{i}" for i in range(n_queries)]
    inputs = FindingInputs(llms=llms, families={m: ("a" if i % 2 else "b") for i, m in enumerate(llms)}, k=5, rag_top=5)
    for d in datasets:
        human = [[f"{q}h1", f"{q}h2"] for q in qids]
        inputs.queries[d] = pl.DataFrame(
            {
                "qid": qids,
                "question": qids,
                "answers": [["x"]] * n_queries,
                "human_pids": human,
                "task": ["qa"] * n_queries,
            }
        )
        for llm in llms:
            contexts = [c.format(llm=llm) for c in TABLE1_CONTEXTS.values()] + [
                f"gold_{c}_from_{s}" for c in "CU" for s in llms
            ]
            # Tables 3, 7 and Figure 9's answers, and the re-ask answers (their twins run too).
            contexts += [f"selected_listwise_pa_from_{s}" for s in llms] + [
                f"reranked_{m}_top5" for m in ("likelihood", "listwise_pa")
            ]
            contexts += [f"reask_{c}" for c in ("none", "human", "topk", "union")] + [
                f"reask_gold_{c}_from_{s}" for c in "CU" for s in llms
            ]
            for ctx in dict.fromkeys(contexts):
                inputs.answers[(d, llm, ctx)] = pl.DataFrame(
                    {
                        "qid": qids,
                        "pids": [[]] * n_queries,
                        "output": [""] * n_queries,
                        "correct": rng.random(n_queries) < 0.6,
                    }
                )
            inputs.known[(d, llm)] = pl.DataFrame({"qid": qids, "known": rng.random(n_queries) < 0.3})
            for cand in "CU":
                inputs.gold[(d, llm, cand)] = pl.DataFrame(
                    {"qid": qids * 2, "pid": [f"{q}p{rng.integers(k)}" for q in qids] + [f"{q}h1" for q in qids]}
                )
            inputs.perplexity[(d, llm)] = pl.DataFrame(
                {
                    "qid": qids * 2,
                    "pid": [f"{q}h1" for q in qids] + [f"{q}h2" for q in qids],
                    "in_gold": [True] * n_queries + [False] * n_queries,
                    "ppl_passage": rng.uniform(5, 40, 2 * n_queries),
                    "ppl_query_passage": rng.uniform(5, 40, 2 * n_queries),
                }
            )
            pids = [f"{q}p{j}" for q in qids for j in range(k)]
            for method in ("pointwise", "pointwise_pa", "listwise", "listwise_pa", "listwise_pa_reject"):
                inputs.judgments[(d, llm, method)] = pl.DataFrame(
                    {
                        "qid": np.repeat(qids, k),
                        "pid": pids,
                        "selected": rng.random(n_queries * k) < 0.2,
                        "parsed": [True] * (n_queries * k),
                        "output": [""] * (n_queries * k),
                    }
                )
            for method in ("retriever", "listwise", "listwise_pa", "likelihood", "attention"):
                ranks = np.concatenate([rng.permutation(k) + 1 for _ in qids])
                inputs.rankings[(d, llm, method)] = pl.DataFrame(
                    {
                        "qid": np.repeat(qids, k),
                        "pid": pids,
                        "rank": ranks,
                        "score": np.zeros(n_queries * k),
                        "parsed": [True] * (n_queries * k),
                    }
                )
    return inputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=2)
    ap.add_argument("--llms", type=int, default=4)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--resamples", type=int, default=2000)
    args = ap.parse_args()
    inputs = synthetic(args.datasets, args.llms, args.queries, args.k)
    rs = Resampling(args.resamples, seed=13)
    out = vars(args).copy()
    t = time.perf_counter()
    entries = all_findings(inputs, rs)
    out["findings_s"] = round(time.perf_counter() - t, 2)
    out["findings_run"] = sum(e["status"] == "run" for e in entries)
    answers = {
        (d, llm): {ctx: f for (d2, llm2, ctx), f in inputs.answers.items() if (d2, llm2) == (d, llm)}
        for d, llm, _ in inputs.answers
    }
    t = time.perf_counter()
    table1_intervals(answers, **rs.kwargs())
    out["table1_intervals_s"] = round(time.perf_counter() - t, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
