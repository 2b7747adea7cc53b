"""Cost of the judgment-analysis helpers at paper scale, printed as one JSON line.

- bootstrap: seconds per paired-difference interval (``report.bootstrap.paired_difference``) on
  0/1 per-query values, BCa vs percentile, for a few query counts;
- ranking metrics: seconds for ``metrics.ranking_metrics_per_query`` on N queries of 20 candidates;
- parsers: outputs parsed per second (``method.parsing``) on typical judgment outputs.

    .venv/bin/python benchmarks/judgment_analysis_speed.py [--resamples 9999]

Nothing here is asserted: it measures and prints.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from llm_utility.method.parsing import parse_ranking, parse_selection, parse_yes_no
from llm_utility.metrics import ranking_metrics_per_query
from llm_utility.report.bootstrap import paired_difference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resamples", type=int, default=9999)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    out: dict = {"resamples": args.resamples, "bootstrap_s": {}}
    for n in (100, 1000, 3000):
        a, b = rng.integers(0, 2, n).astype(float), rng.integers(0, 2, n).astype(float)
        for method in ("BCa", "percentile"):
            t = time.perf_counter()
            paired_difference(a, b, args.resamples, seed=1, method=method)
            out["bootstrap_s"][f"{method}_n{n}"] = round(time.perf_counter() - t, 3)

    n_q = 3000
    pids = [f"p{i}" for i in range(20)]
    rankings = {f"q{i}": list(rng.permutation(pids)) for i in range(n_q)}
    gold = {f"q{i}": set(rng.choice(pids, 3, replace=False)) for i in range(n_q)}
    t = time.perf_counter()
    ranking_metrics_per_query(rankings, gold, k=5)
    out[f"ranking_metrics_s_{n_q}q"] = round(time.perf_counter() - t, 3)

    outputs = [
        "[3]",
        "My selection: [1], [4]",
        "1, 3 and 4",
        "None of the passages",
        "Yes.",
        "Answer: No",
        "[2] > [1] > [3] > [5] > [4]",
        "<think>Passage [1] is about Paris.</think>\n[2]",
    ] * 2000
    t = time.perf_counter()
    for o in outputs:
        parse_selection(o, 20), parse_yes_no(o), parse_ranking(o, 20)
    out["parse_outputs_per_s"] = round(len(outputs) / (time.perf_counter() - t))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
