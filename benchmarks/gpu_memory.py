"""Minimum GPU memory per paper LLM, computed from each model's published config.json.

    .venv/bin/python benchmarks/gpu_memory.py [--max-model-len 8192] [--attention-tokens 3400]
    python benchmarks/gpu_memory.py --config resources/models/qwen3-32b/config.json   # a materialized model

Per job, on each of its `gpu` devices (vLLM's tensor parallelism splits weights and KV heads evenly):
  weights    bf16 parameters (2 bytes each), counted from the config (embeddings, LM head unless tied,
             per layer q/k/v/o projections, the gated MLP, the norms);
  KV cache   one sequence of `max_model_len` tokens: 2 (K and V) x layers x KV heads x head dim x 2 bytes
             per token; vLLM refuses to start when it cannot hold one such sequence;
  vLLM       weights + KV cache + about 2 GiB of activations, CUDA graphs and the CUDA context, all within
             `gpu_memory_utilization` (0.9) of the device;
  attention  the attention pass (Eq. 6) runs after the engine has shut down, on the transformers backend
             with eager attention and the model spread over the job's GPUs: weights / gpu, plus one
             layer's attention matrices at a time, heads x tokens^2 elements, held as bf16 scores and
             their fp32 softmax and its bf16 copy, about 8 bytes per element at the peak.
Nothing here is measured on a GPU; benchmarks/gpu_check.py is the check to run on one.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

GIB = 2**30
# From each model's config.json on the Hugging Face hub at the revision config/paper.yaml pins
# (https://huggingface.co/<id>/blob/<revision>/config.json).
PAPER_MODELS = {
    "Llama-3.1-8B-Instruct": {
        "gpu": 1,
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": False,
    },
    "Qwen3-8B": {
        "gpu": 1,
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": False,
        "qk_norm": True,
    },
    "Qwen3-14B": {
        "gpu": 1,
        "vocab_size": 151936,
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": False,
        "qk_norm": True,
    },
    "Qwen3-32B": {
        "gpu": 2,
        "vocab_size": 151936,
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "tie_word_embeddings": False,
        "qk_norm": True,
    },
}
VLLM_OVERHEAD_GIB = 2.0
UTILIZATION = 0.9
ATTENTION_BYTES_PER_ELEMENT = 8  # bf16 scores (2) + fp32 softmax (4) + its bf16 copy (2)


def parameters(c: dict) -> int:
    h, hd, layers = (
        c["hidden_size"],
        c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
        c["num_hidden_layers"],
    )
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    per_layer = (
        h * q + 2 * h * kv + q * h + 3 * h * c["intermediate_size"] + 2 * h + (2 * hd if c.get("qk_norm") else 0)
    )
    embeddings = c["vocab_size"] * h * (1 if c.get("tie_word_embeddings") else 2)
    return embeddings + layers * per_layer + h


def kv_bytes_per_token(c: dict) -> int:
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * hd * 2


def row(name: str, c: dict, max_model_len: int, attention_tokens: int) -> dict:
    gpus = c.get("gpu", 1)
    weights = parameters(c) * 2 / GIB
    kv = kv_bytes_per_token(c) * max_model_len / GIB
    vllm_need = (weights + kv) / gpus + VLLM_OVERHEAD_GIB
    attention_layer = c["num_attention_heads"] * attention_tokens**2 * ATTENTION_BYTES_PER_ELEMENT / GIB
    return {
        "model": name,
        "gpu": gpus,
        "parameters_B": round(parameters(c) / 1e9, 2),
        "weights_GiB": round(weights, 1),
        "kv_GiB_per_sequence": round(kv, 2),
        "vllm_GiB_per_gpu": round(vllm_need, 1),
        "vllm_min_gpu_GiB": math.ceil(vllm_need / UTILIZATION),
        "attention_layer_GiB": round(attention_layer, 1),
        "attention_GiB_per_gpu": round(weights / gpus + attention_layer, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument(
        "--attention-tokens",
        type=int,
        default=3400,
        help="tokens of the attention pass: the top-k answer prompt and its answer",
    )
    parser.add_argument(
        "--config", action="append", default=[], help="a model's config.json (repeatable); default: the paper's four"
    )
    parser.add_argument("--gpu", type=int, default=1, help="GPUs of the models given with --config")
    args = parser.parse_args()
    models = {
        Path(p).parent.name: {**json.loads(Path(p).read_text()), "gpu": args.gpu} for p in args.config
    } or PAPER_MODELS
    rows = [row(name, c, args.max_model_len, args.attention_tokens) for name, c in models.items()]
    print(
        f"max_model_len {args.max_model_len}, attention pass over {args.attention_tokens} tokens, "
        f"gpu_memory_utilization {UTILIZATION}, {VLLM_OVERHEAD_GIB} GiB vLLM overhead per GPU\n"
    )
    print(
        "| model | gpu | parameters | bf16 weights | KV cache, one sequence | vLLM needs per GPU "
        "| smallest GPU for vLLM | eager attention, one layer | attention pass per GPU |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['model']} | {r['gpu']} | {r['parameters_B']}B | {r['weights_GiB']} GiB "
            f"| {r['kv_GiB_per_sequence']} GiB | {r['vllm_GiB_per_gpu']} GiB | {r['vllm_min_gpu_GiB']} GiB "
            f"| {r['attention_layer_GiB']} GiB | {r['attention_GiB_per_gpu']} GiB |"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
