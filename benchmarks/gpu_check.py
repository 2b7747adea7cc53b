"""The GPU check in one command: the project's transformers backend and encoder on CUDA, against the
same calls on the CPU, on tiny models built here from files in the repository (no download).

    python benchmarks/gpu_check.py [--json out.json]

For the day a GPU machine is at hand: it needs torch, transformers and sentence-transformers (and
the library's own light dependencies: numpy, pyyaml, regex, tqdm; not polars or pyarrow), no network,
no vLLM, no FAISS. It

  1. builds a tiny random Llama (grouped-query attention) with a BPE tokenizer trained on the
     repository's README and a ChatML chat template, and a tiny random BERT for sentence-transformers,
     in a temporary folder;
  2. runs the suite below on the CPU (fp32, in a child process that sees no GPU), and, where CUDA is
     available, inside a GPU lease (llm_utility.gpu.lease_gpus) on CUDA, where the backend picks
     bfloat16 and device_map="auto" by itself;
  3. prints one table: each check on each device, and how far the CUDA result is from the CPU one.

The suite: greedy generation of prompts of different lengths, in one left-padded batch and one at a
time (they must agree on each device); target scoring (teacher-forced log-probabilities); the
attention pass (Eq. 6) and, with two or more GPUs, the same on a model split over two of them;
prefill throughput (tokens per second of a forward pass over a batch); passage encoding with
sentence-transformers; and, on CUDA, the lease itself (its lock held inside, the generator closed
and the lock released after). Without CUDA the CUDA rows say "skipped". The model is tiny, so the
throughputs say the path runs at GPU speed, not what a paper model achieves.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QUESTIONS = [
    "What is the capital of France?",
    "Which rule builds the FAISS index, and on which device does it train?",
    "Information: Lima is the capital of Peru. It lies on the Pacific coast. Question: What is the capital of Peru?",
    "Information: the generation store keys every call by model, backend, prompt and decoding. A killed job "
    "loses at most the batch in flight. Question: what does a killed job lose?",
]
PASSAGES = [
    "Oslo is the capital and most populous city of Norway.",
    "Lima is the capital of Peru, on the Pacific coast.",
    "The quick brown fox jumps over the lazy dog.",
]
# How far bf16 on CUDA may sit from fp32 on the CPU before a row says "differs" (a tiny random model:
# log-probabilities of a few nats, attention masses below 1).
TOLERANCE = {"score": 0.1, "attention": 0.02, "encode": 0.99}


# ---------------------------------------------------------------------------------------------------
# Tiny models from the repository's own text


def _repo_text() -> list[str]:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip()] + QUESTIONS + PASSAGES


def build_models(root: Path) -> tuple[Path, Path]:
    """A tiny Llama (chat, no BOS token, like Qwen3) and a tiny BERT, with tokenizers trained here."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    llm = root / "tiny-llama"
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe.train_from_iterator(
        _repo_text(),
        trainers.BpeTrainer(
            vocab_size=1024, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHATML
    )
    tok.save_pretrained(llm)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=0.1,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(llm)

    bert = root / "tiny-bert"
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.train_from_iterator(
        _repo_text(),
        trainers.WordPieceTrainer(vocab_size=1024, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]),
    )
    cls, sep = wordpiece.token_to_id("[CLS]"), wordpiece.token_to_id("[SEP]")
    wordpiece.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    wordpiece.decoder = decoders.WordPiece()
    PreTrainedTokenizerFast(
        tokenizer_object=wordpiece,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    ).save_pretrained(bert)
    torch.manual_seed(1)
    BertModel(
        BertConfig(
            vocab_size=wordpiece.get_vocab_size(),
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=256,
            max_position_embeddings=512,
        )
    ).save_pretrained(bert)
    return llm, bert


# ---------------------------------------------------------------------------------------------------
# The suite, on whatever device the backend picks


def _generator(llm: Path, batch_size: int):
    from llm_utility.generation import load_generator

    manifest = {"slug": "tiny-llama", "backend": "transformers", "load_path": str(llm), "fingerprint": "gpu-check"}
    spec = {"backend": "transformers", "weights": {"path": str(llm)}, "prompt_format": "chat", "batch_size": batch_size}
    return load_generator(manifest, spec)


def _attention_requests(gen) -> list:
    from llm_utility.generation import AttentionRequest

    requests = []
    for question, answer in (("What is the capital of Peru?", "Lima"), ("Which city is in Norway?", "Oslo is")):
        prompt = gen.render(
            "Information:\n" + "\n".join(f"[{i + 1}] {p}" for i, p in enumerate(PASSAGES)) + f"\nQuestion: {question}"
        )
        spans = tuple((prompt.index(p), prompt.index(p) + len(p)) for p in PASSAGES)
        requests.append(AttentionRequest(prompt, spans, answer))
    return requests


def _timed(fn, repeat: int = 3) -> float:
    """Seconds of the fastest of ``repeat`` runs after one warm-up (CUDA synchronized around each)."""
    import torch

    def sync():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    fn()
    best = float("inf")
    for _ in range(repeat):
        sync()
        started = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - started)
    return best


def run_suite(llm: Path, bert: Path, prefill_batch: int, prefill_tokens: int) -> dict[str, Any]:
    import torch

    from llm_utility.retrieval.encoders import load_encoder

    out: dict[str, Any] = {}
    batched, single = _generator(llm, batch_size=len(QUESTIONS)), _generator(llm, batch_size=1)
    prompts = [batched.render(q) for q in QUESTIONS]
    out["generate"] = batched.generate(prompts, max_new_tokens=12)
    out["generate_one_at_a_time"] = single.generate(prompts, max_new_tokens=12)
    single.close()
    model = batched.model
    out["device"] = str(model.get_input_embeddings().weight.device)
    out["dtype"] = str(model.dtype).replace("torch.", "")
    pairs = [
        (prompts[0], "Paris"),
        (prompts[2], "Lima is the capital"),
        ("", "The quick brown fox"),
        (prompts[3], "the batch"),
    ]
    out["score"] = batched.score(pairs)
    out["attention"] = batched.attention(_attention_requests(batched))

    ids = torch.randint(3, model.config.vocab_size, (prefill_batch, prefill_tokens))
    ids = ids.to(model.get_input_embeddings().weight.device)
    with torch.inference_mode():
        seconds = _timed(lambda: model(input_ids=ids, logits_to_keep=1))
    out["prefill_tokens_per_s"] = prefill_batch * prefill_tokens / seconds
    batched.close()
    out["closed"] = not batched.loaded

    encoder = load_encoder(
        {"backend": "sentence-transformers", "model": str(bert), "pooling": "cls", "fp16": True, "batch_size": 32}
    )
    texts = [f"{PASSAGES[i % len(PASSAGES)]} {QUESTIONS[i % len(QUESTIONS)]}" for i in range(256)]
    out["encode"] = encoder.encode_passages(texts[:8]).tolist()
    out["encode_passages_per_s"] = len(texts) / _timed(lambda: encoder.encode_passages(texts), repeat=2)
    out["encode_device"] = str(encoder.model.device)
    encoder.close()
    return out


def split_attention(llm: Path) -> dict[str, Any]:
    """Eq. 6 on the model split over two GPUs (the first half of the layers on each), as device_map="auto"
    spreads a large model, against the same model on one GPU."""
    gen = _generator(llm, batch_size=1)
    requests = _attention_requests(gen)
    one = gen.attention(requests)
    gen.close()
    split = _generator(llm, batch_size=1)
    from transformers import AutoModelForCausalLM

    n_layers = 4
    device_map = {"model.embed_tokens": 0, "model.rotary_emb": 0, "model.norm": 1, "lm_head": 1}
    device_map |= {f"model.layers.{i}": 0 if i < n_layers // 2 else 1 for i in range(n_layers)}
    model = AutoModelForCausalLM.from_pretrained(str(llm), dtype=split.model.dtype, device_map=device_map)
    split.__dict__["model"] = model.eval()
    two = split.attention(requests)
    devices = sorted({str(p.device) for p in model.parameters()})
    split.close()
    return {"one_gpu": one, "two_gpus": two, "devices": devices}


# ---------------------------------------------------------------------------------------------------
# Lease, comparison, table


def lock_is_free(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def on_cuda(llm: Path, bert: Path, args: argparse.Namespace) -> dict[str, Any]:
    from llm_utility.gpu import lease_gpus

    lock_dir = Path(tempfile.mkdtemp(prefix="gpu-check-locks-"))
    with lease_gpus(1, lock_dir) as leased:
        locks = sorted(lock_dir.glob("*.lock"))
        held_inside = bool(locks) and not any(lock_is_free(p) for p in locks)
        result = run_suite(llm, bert, args.prefill_batch, args.prefill_tokens)
        gen = _generator(llm, batch_size=1)  # left open: the lease must close it
        gen.generate([gen.render(QUESTIONS[0])], max_new_tokens=2)
    result["lease"] = {
        "devices": leased,
        "held_inside": held_inside,
        "released_after": bool(locks) and all(lock_is_free(p) for p in locks),
        "generator_closed_by_lease": not gen.loaded,
    }
    import torch

    if torch.cuda.device_count() >= 2:
        result["split"] = split_attention(llm)
    return result


def _max_abs(a: list, b: list) -> float:
    import numpy as np

    flat_a = np.concatenate([np.ravel(x) for x in a]) if a else np.zeros(0)
    flat_b = np.concatenate([np.ravel(x) for x in b]) if b else np.zeros(0)
    if flat_a.shape != flat_b.shape:
        return float("inf")
    return float(np.max(np.abs(flat_a - flat_b))) if flat_a.size else 0.0


def _min_cosine(a: list, b: list) -> float:
    import numpy as np

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.min(np.sum(x * y, axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))))


def rows(cpu: dict[str, Any], cuda: dict[str, Any] | None, reason: str) -> list[tuple[str, str, str, str]]:
    """(check, CPU, CUDA, agreement) for the table."""
    skipped = f"skipped ({reason})"
    n = len(QUESTIONS)

    def same_as_single(result):
        return f"{sum(a == b for a, b in zip(result['generate'], result['generate_one_at_a_time']))}/{n} equal"

    out = [
        (
            "device, dtype",
            f"{cpu['device']}, {cpu['dtype']}",
            f"{cuda['device']}, {cuda['dtype']}" if cuda else skipped,
            "",
        )
    ]
    out.append(
        (
            "generate: padded batch vs one at a time",
            same_as_single(cpu),
            same_as_single(cuda) if cuda else skipped,
            f"{sum(a == b for a, b in zip(cpu['generate'], cuda['generate']))}/{n} outputs equal to the CPU's"
            if cuda
            else "",
        )
    )
    for key, label in (("score", "score: log-probabilities"), ("attention", "attention (Eq. 6): passage masses")):
        gap = _max_abs(cpu[key], cuda[key]) if cuda else None
        agreement = f"max |CUDA - CPU| {gap:.4f} ({'ok' if gap <= TOLERANCE[key] else 'differs'})" if cuda else ""
        out.append(
            (
                label,
                f"{sum(len(x) for x in cpu[key])} values",
                f"{sum(len(x) for x in cuda[key])} values" if cuda else skipped,
                agreement,
            )
        )
    if cuda and "split" in cuda:
        gap = _max_abs(cuda["split"]["one_gpu"], cuda["split"]["two_gpus"])
        out.append(
            (
                "attention split over 2 GPUs vs 1",
                "-",
                ", ".join(cuda["split"]["devices"]),
                f"max |2 GPUs - 1 GPU| {gap:.2e}",
            )
        )
    else:
        out.append(("attention split over 2 GPUs vs 1", "-", "skipped (fewer than 2 GPUs)" if cuda else skipped, ""))
    out.append(
        (
            "prefill tokens/s",
            f"{cpu['prefill_tokens_per_s']:,.0f}",
            f"{cuda['prefill_tokens_per_s']:,.0f}" if cuda else skipped,
            f"{cuda['prefill_tokens_per_s'] / cpu['prefill_tokens_per_s']:,.0f}x the CPU" if cuda else "",
        )
    )
    cos = _min_cosine(cpu["encode"], cuda["encode"]) if cuda else None
    out.append(
        (
            "encode (sentence-transformers) passages/s",
            f"{cpu['encode_passages_per_s']:,.0f} on {cpu['encode_device']}",
            f"{cuda['encode_passages_per_s']:,.0f} on {cuda['encode_device']}" if cuda else skipped,
            f"min cosine to the CPU's {cos:.4f} ({'ok' if cos >= TOLERANCE['encode'] else 'differs'})" if cuda else "",
        )
    )
    if cuda:
        lease = cuda["lease"]
        ok = lease["held_inside"] and lease["released_after"] and lease["generator_closed_by_lease"]
        detail = (
            f"GPU(s) {lease['devices']}: lock held inside {lease['held_inside']}, "
            f"released after {lease['released_after']}, "
            f"generator closed by the lease {lease['generator_closed_by_lease']}"
        )
        out.append(("lease taken and released", "-", "ok" if ok else "FAILED", detail))
    else:
        out.append(("lease taken and released", "-", skipped, ""))
    return out


def table(lines: list[tuple[str, str, str, str]]) -> str:
    md = ["| check | CPU (fp32) | CUDA (bf16) | CUDA vs CPU |", "|---|---|---|---|"]
    md += [f"| {' | '.join(cells)} |" for cells in lines]
    return "\n".join(md)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write every result here")
    parser.add_argument("--prefill-batch", type=int, default=8)
    parser.add_argument("--prefill-tokens", type=int, default=512)
    parser.add_argument("--models", help=argparse.SUPPRESS)  # the child process: models already built
    parser.add_argument("--cpu-suite", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.cpu_suite:
        llm, bert = Path(args.models) / "tiny-llama", Path(args.models) / "tiny-bert"
        print(json.dumps(run_suite(llm, bert, args.prefill_batch, args.prefill_tokens)))
        return

    import torch

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as root:
        llm, bert = build_models(Path(root))
        # The CPU reference in a child that sees no GPU, so the backend picks the CPU and fp32 itself.
        env = {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": "",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p),
        }
        cmd = [
            sys.executable,
            __file__,
            "--cpu-suite",
            "--models",
            root,
            "--prefill-batch",
            str(args.prefill_batch),
            "--prefill-tokens",
            str(args.prefill_tokens),
        ]
        child = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if child.returncode != 0:
            sys.exit(f"the CPU suite failed:\n{child.stderr[-4000:]}")
        cpu = json.loads(child.stdout.strip().splitlines()[-1])
        if torch.cuda.is_available():
            cuda, reason = on_cuda(llm, bert, args), ""
        else:
            cuda, reason = None, "no CUDA device"
    print(
        f"torch {torch.__version__}, CUDA devices: {torch.cuda.device_count()}"
        + (f" ({torch.cuda.get_device_name(0)})" if cuda else "")
        + f"; {time.perf_counter() - started:.0f} s\n"
    )
    print(table(rows(cpu, cuda, reason)))
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu, "cuda": cuda}, indent=1))


if __name__ == "__main__":
    main()
