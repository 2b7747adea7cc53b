"""Benchmark the transformers backend's CPU engine on this machine: which arithmetic is fastest here.

For this CPU (its flags are printed first) and one thread:
  - the GEMM peak of each arithmetic: a 2048x576x1536 product (SmolLM2's MLP at a prefill's size)
    in float32, bfloat16 and int8 (``cpu_arithmetic.Int8RowLinear``: fbgemm, rows quantized one
    by one), in GFLOP/s;
  - for both demo models in each arithmetic, through the project's own engine (``hf_engine``):
    prefill tokens a second (8 prompts of ~230 tokens, each alone, no prefix reused, the last
    position's greedy token read as a generation reads it), the share of that arithmetic's GEMM
    peak the prefill reaches (2 x non-embedding parameters FLOPs a token), and decode tokens a
    second (those 8 rows decoding 16 tokens together, less their first token);
  - which arithmetic ``dtype: auto`` picks here (``cpu_arithmetic.resolve_dtype``).

    .venv/bin/python benchmarks/cpu_engine.py [--models smollm2-135m gemma3-270m]
        [--dtypes float32 bfloat16 int8] [--prompts 8] [--new-tokens 16] [--json out.json]
        [--emulate avx2|avx512]

``--emulate`` runs it again with torch's kernels capped below this CPU (``EMULATE``): ``avx2`` as
an AVX2-only CPU (ATen, oneDNN, MKL and fbgemm all at AVX2), ``avx512`` as an AVX-512 BF16/VNNI CPU
without AMX (oneDNN below AMX). The same variables run the whole demo that way
(docs/performance.md, "The CPU engine"); clocks, caches and memory stay this machine's.

The demo models must be materialized (`snakemake --cores all resources/models/<llm>/manifest.json`).
Nothing here is asserted: it measures and prints; docs/performance.md keeps its table per machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from llm_utility.generation import cpu_arithmetic, hf_engine, load_generator  # noqa: E402

# The environment that caps torch's kernels below this CPU's, per emulated CPU (--emulate).
EMULATE = {
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
    },
    "avx512": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
}

# ~230 tokens: an answer prompt with a few passages, as the demo's are.
PASSAGES = (
    "Information: Chile The capital of Chile is Santiago. Chile lies in South America, in the subregion "
    "of South America, and borders Argentina, Bolivia and Peru. Its population was about 19 million in "
    "2020 and its area is 756,102 square kilometres. Chile Its official language is Spanish, and its "
    "currency is the Chilean peso (CLP). Its calling code is +56 and its internet domain is .cl. Peru "
    "The capital of Peru is Lima. Peru lies in South America and borders Bolivia, Brazil, Chile, "
    "Colombia and Ecuador. Its population was about 33 million in 2020. "
)
QUESTIONS = [
    "What is the capital of Chile?",
    "Which currency is used in Chile?",
    "What is the calling code of Chile?",
    "Which countries border Peru?",
    "What is the capital of Peru?",
    "What is the internet domain of Chile?",
    "How many people live in Peru?",
    "Which language is spoken in Chile?",
]


def gemm_peak(dtype: str, m: int = 2048, k: int = 576, n: int = 1536, seconds: float = 2.0) -> float:
    """GFLOP/s of one m x k x n product in ``dtype`` on the current thread count."""
    torch.manual_seed(0)
    x, linear = torch.randn(m, k), torch.nn.Linear(k, n, bias=False)
    if dtype == "int8":
        layer = cpu_arithmetic.Int8RowLinear(linear)
        run = lambda: layer(x)  # noqa: E731
    else:
        xd, wd = x.to(getattr(torch, dtype)), linear.weight.detach().to(getattr(torch, dtype))
        run = lambda: torch.nn.functional.linear(xd, wd)  # noqa: E731
    with torch.inference_mode():
        run()
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            run()
            done += 1
    return 2 * m * k * n * done / (time.perf_counter() - started) / 1e9


def non_embedding_parameters(model: torch.nn.Module) -> int:
    """Weights of the linear layers a token's forward pass multiplies: all but the output layer
    (which multiplies kept positions only), read from the layers' shapes, whatever their arithmetic."""
    head = model.get_output_embeddings()
    head = getattr(head, "linear", head)  # inside cpu_arithmetic.StepRows
    linears = (torch.nn.Linear, cpu_arithmetic.Int8RowLinear, cpu_arithmetic.PackedBfloat16Linear)
    return sum(m.in_features * m.out_features for m in model.modules() if isinstance(m, linears) and m is not head)


def bench_model(slug: str, spec: dict, dtype: str, prompts: int, new_tokens: int) -> dict:
    manifest = REPO / "resources" / "models" / slug / "manifest.json"
    if not manifest.is_file():
        sys.exit(f"{manifest} is missing: snakemake --cores all {manifest.relative_to(REPO)}")
    gen = load_generator(manifest, {**spec, "dtype": dtype, "keep_loaded": None}, threads=1)  # in this process
    params = non_embedding_parameters(gen.model)
    texts = [gen.render(f"{PASSAGES}Question: {q} Answer:") for q in QUESTIONS[:prompts]]
    ids = [gen.encode(t) for t in texts]
    model = gen.model
    with torch.inference_mode():
        # As a generation's prefill runs: only the last position's largest logit is read (in int8,
        # from the output layer's shortlist; cpu_arithmetic.ShortlistHead, built at the warm-up).
        with cpu_arithmetic.argmax_only(model):
            hf_engine.prefill(model, ids[0], hf_engine.PrefixCache())  # warm-up
            started = time.perf_counter()
            for x in ids:
                hf_engine.prefill(model, x, hf_engine.PrefixCache())  # a fresh cache: nothing reused
            prefill_s = time.perf_counter() - started

        def generate(new: int) -> tuple[list[list[int]], float]:
            started = time.perf_counter()
            out = hf_engine.greedy_generate(
                model,
                ids,
                new,
                eos=set(),
                finished=lambda tokens: False,
                cache=hf_engine.PrefixCache(),
                workspace=hf_engine.Workspace(),
            )
            return out, time.perf_counter() - started

        generate(2)  # warm-up: a model's first greedy step prepares its int8 shortlist head once
        # Decoding is a generation of new_tokens less one of a single token (the same prefills).
        first, first_s = generate(1)
        out, total_s = generate(new_tokens)
    tokens = sum(len(x) for x in ids)
    decode_s = total_s - first_s
    decoded = sum(len(o) for o in out) - sum(len(o) for o in first)
    gen.close()
    return {
        "llm": slug,
        "dtype": gen.dtype,
        "prompt_tokens": tokens,
        "prefill_tokens_per_s": tokens / prefill_s,
        "prefill_gflops": 2 * params * tokens / prefill_s / 1e9,
        "decode_tokens_per_s": decoded / decode_s,
        "decode_seconds": decode_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16", "int8"])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--emulate", choices=sorted(EMULATE), help="cap torch's kernels as on that CPU")
    args = parser.parse_args()
    if args.emulate and any(os.environ.get(k) != v for k, v in EMULATE[args.emulate].items()):
        # The caps are read when torch loads its kernels: start again with them set.
        env = {**os.environ, **EMULATE[args.emulate]}
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    flags = cpu_arithmetic.cpu_flags()
    dtypes = [d for d in args.dtypes if d != "int8" or cpu_arithmetic.int8_supported()]
    print("CPU flags:", " ".join(name for name, on in flags.items() if on) or "none reported")
    if args.emulate:
        print(f"emulating {args.emulate}:", " ".join(f"{k}={v}" for k, v in EMULATE[args.emulate].items()))
    print("dtype auto picks here:", cpu_arithmetic.resolve_dtype("auto", cuda=False))
    peaks = {d: gemm_peak(d) for d in dtypes}
    print("\nGEMM 2048x576x1536, one thread (GFLOP/s):")
    for d, g in peaks.items():
        print(f"  {d:9s} {g:7.1f}")
    rows = []
    print("\n| model | arithmetic | prefill tokens/s | GFLOP/s (share of its GEMM peak) | decode tokens/s (8 rows) |")
    print("|---|---|--:|--:|--:|")
    for slug in args.models:
        for d in dtypes:
            r = bench_model(slug, config["llms"][slug], d, args.prompts, args.new_tokens)
            r["gemm_peak_gflops"] = peaks[d]
            rows.append(r)
            print(
                f"| {slug} | {d} | {r['prefill_tokens_per_s']:,.0f} | {r['prefill_gflops']:.0f} "
                f"({100 * r['prefill_gflops'] / peaks[d]:.0f}%) | {r['decode_tokens_per_s']:,.1f} |",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps({"flags": flags, "gemm_gflops": peaks, "models": rows}, indent=1))


if __name__ == "__main__":
    main()
