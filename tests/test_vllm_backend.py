"""The vLLM backend without a GPU: a stand-in ``vllm`` module records what the backend asks of it.

``tests/test_vllm_contract.py`` checks the same arguments against the real vLLM (make vllm-contract).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from llm_utility.generation import load_generator
from llm_utility.generation.vllm_backend import engine_kwargs, sampling_kwargs, scoring_sampling_kwargs
from llm_utility.gpu import lease_gpus

SRC = str(Path(__file__).resolve().parents[1] / "src")
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)}
SPEC = {
    "backend": "vllm",
    "weights": {"hub": "org/tiny", "revision": "a" * 40},
    "prompt_format": "chat",
    "gpu": 2,
    "max_model_len": 4096,
    "gpu_memory_utilization": 0.85,
    "max_num_seqs": 64,
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> dict:
    """A materialized-looking folder with a word-level tokenizer and a chat template (no weights needed)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    root = tmp_path_factory.mktemp("tiny")
    words = [
        "<unk>",
        "<s>",
        "</s>",
        "what",
        "is",
        "the",
        "capital",
        "of",
        "france",
        "?",
        "paris",
        "answer",
        "more",
        "0",
        "1",
        "2",
    ]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(root / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "chat_template": "<s>{% for m in messages %}{{ m.content }} {% endfor %}",
    }
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    return {"slug": "tiny", "backend": "vllm", "load_path": str(root), "fingerprint": "hub:org/tiny@" + "a" * 40}


class StandIn:
    """A ``vllm`` module: records engine and sampling arguments, the environment the engine starts in,
    and shutdowns."""

    def __init__(self):
        self.calls: dict = {"shutdowns": 0}
        calls = self.calls

        class SamplingParams:
            def __init__(self, **kw):
                calls["sampling"] = kw

        class EngineCore:
            def shutdown(self):
                calls["shutdowns"] += 1

        class LLM:
            def __init__(self, **kw):
                main = sys.modules["__main__"]
                calls["engine"] = kw
                calls["start_method"] = os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")
                calls["main_visible"] = getattr(main, "__file__", None) or getattr(main, "__spec__", None)
                self.llm_engine = types.SimpleNamespace(engine_core=EngineCore())

            def generate(self, requests, params, use_tqdm=True):
                from transformers import AutoTokenizer

                calls["requests"] = requests
                out = types.SimpleNamespace
                tokenizer = AutoTokenizer.from_pretrained(calls["engine"]["model"])
                texts = [f" answer {i}\nmore" for i in range(len(requests))]
                return [
                    out(outputs=[out(text=t, token_ids=tokenizer.encode(t, add_special_tokens=False))]) for t in texts
                ]

        self.module = types.SimpleNamespace(__version__="0.33.0", LLM=LLM, SamplingParams=SamplingParams)


@pytest.fixture
def standin(monkeypatch):
    fake = StandIn()
    monkeypatch.setitem(sys.modules, "vllm", fake.module)
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    return fake


def test_engine_and_sampling_arguments():
    assert engine_kwargs("/m", SPEC, "bfloat16") == {
        "model": "/m",
        "tensor_parallel_size": 2,
        "dtype": "bfloat16",
        "enable_prefix_caching": True,
        "seed": 0,
        "gpu_memory_utilization": 0.85,
        "max_model_len": 4096,
        "max_num_seqs": 64,
    }
    minimal = engine_kwargs("/m", {"gpu": 1}, "float16")
    assert "max_num_seqs" not in minimal and "max_model_len" not in minimal and "gpu_memory_utilization" not in minimal
    assert "revision" not in minimal  # the folder is the pinned commit
    assert (
        "enforce_eager" not in minimal
        and engine_kwargs("/m", {"gpu": 1, "enforce_eager": True}, "float16")["enforce_eager"]
    )
    assert sampling_kwargs(12, ["\n", ""]) == {"temperature": 0.0, "max_tokens": 12, "stop": ["\n"]}
    assert sampling_kwargs(5)["stop"] is None
    assert scoring_sampling_kwargs() == {
        "temperature": 0.0,
        "max_tokens": 1,
        "prompt_logprobs": 0,
        "detokenize": False,
        "skip_reading_prefix_cache": True,
    }
    assert scoring_sampling_kwargs(1, read_prefix_cache=True)["skip_reading_prefix_cache"] is False


def test_engine_arguments_on_a_cpu():
    """gpu: 0 is vLLM's CPU build: an explicit KV cache (GiB -> bytes), eager unless asked, and no
    GPU memory share; the rest as on a GPU."""
    spec = {"gpu": 0, "cpu_kv_cache_gib": 1.5, "enforce_eager": None, "gpu_memory_utilization": 0.9, "max_num_seqs": 8}
    assert engine_kwargs("/m", spec, "float32") == {
        "model": "/m",
        "tensor_parallel_size": 1,
        "dtype": "float32",
        "enable_prefix_caching": True,
        "seed": 0,
        "kv_cache_memory_bytes": 1610612736,
        "enforce_eager": True,
        "max_num_seqs": 8,
    }
    assert engine_kwargs("/m", {**spec, "enforce_eager": False}, "float32")["enforce_eager"] is False


def test_engine_starts_spawn_safe_and_keys_include_version_and_tp(tiny_model, standin, monkeypatch):
    # As under `python job.py` (a pytest-xdist worker's __main__ has no file of its own).
    main = sys.modules["__main__"]
    monkeypatch.setattr(main, "__file__", "/work/scripts/job.py", raising=False)
    gen = load_generator(tiny_model, SPEC)
    assert gen.store_key_extras() == {"vllm": "0.33.0", "tensor_parallel_size": 2}
    assert not gen.loaded and "engine" not in standin.calls  # nothing started before a prompt misses
    prompts = [gen.render("what is the capital of france ?")]
    # The answer is the generated ids decoded here (word-level: the stand-in's newline is gone).
    assert gen.generate(prompts, max_new_tokens=12, stop=["\n"]) == ["answer 0 more"]
    assert standin.calls["engine"] == engine_kwargs(tiny_model["load_path"], gen.spec, "bfloat16")
    # A whitespace stop is applied after generation (an answer may begin with a newline), not by vLLM.
    assert standin.calls["sampling"] == sampling_kwargs(12, [])
    assert standin.calls["requests"] == [{"prompt_token_ids": gen.encode(prompts[0])}]
    assert gen.encode(prompts[0]).count(gen.tokenizer.bos_token_id) == 1  # the template wrote it
    # Workers are spawned, and cannot see the job script to re-run it; afterwards it is back.
    assert standin.calls["start_method"] == "spawn" and standin.calls["main_visible"] is None
    assert main.__file__ == "/work/scripts/job.py"
    gen.close()
    gen.close()
    assert standin.calls["shutdowns"] == 1 and not gen.loaded


def test_the_lease_shuts_the_engine_down_before_releasing(tiny_model, standin, tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with lease_gpus(2, tmp_path, n_devices=2):
        gen = load_generator(tiny_model, SPEC)
        gen.generate([gen.render("paris")], max_new_tokens=4)
        assert standin.calls["shutdowns"] == 0
    assert standin.calls["shutdowns"] == 1 and not gen.loaded


@pytest.fixture(autouse=True)
def _environment_restored():
    """What a backend sets in os.environ (vLLM's CPU variables, for one) is undone after each test:
    later tests of the process inherit it otherwise (tests/test_vllm_cpu.py's Snakemake job)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


CPU_SPEC = {**SPEC, "gpu": 0, "max_num_seqs": None, "gpu_memory_utilization": 0.9}
CPU_ENV = (
    "VLLM_CPU_KVCACHE_SPACE",
    "TORCHDYNAMO_DISABLE",
    "VLLM_CPU_OMP_THREADS_BIND",
    "OMP_NUM_THREADS",
    "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_CONFIGURE_LOGGING",
)


def test_a_cpu_run_sets_its_environment_and_keys_its_calls_as_a_cpu_run(tiny_model, standin, monkeypatch):
    import torch

    from llm_utility.generation import cpu_arithmetic

    for name in CPU_ENV:
        monkeypatch.delenv(name, raising=False)  # restored as they were after the test
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "40")
    monkeypatch.setattr(torch, "set_num_threads", lambda n: standin.calls.setdefault("threads", n))
    monkeypatch.setattr(cpu_arithmetic, "cpu_flags", lambda: {"amx_bf16": False})
    gen = load_generator(tiny_model, CPU_SPEC, threads=1)
    # The config sizes the KV cache; the variable vLLM would let override it is gone.
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ and os.environ["TORCHDYNAMO_DISABLE"] == "1"
    # The job's thread share, as for the transformers backend, in the engine process and this one.
    assert os.environ["OMP_NUM_THREADS"] == "1" and os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert standin.calls["threads"] == 1
    # The engine runs in the job's process: no engine and worker processes importing vLLM again.
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    # So vLLM's own log lines reach the job's log (they propagate to the root logger).
    assert os.environ["VLLM_CONFIGURE_LOGGING"] == "0"
    # null/auto: float32 on a CPU without AMX (the demo's dequantized weights are float32 anyway).
    assert gen.dtype == "float32"
    assert load_generator(tiny_model, {**CPU_SPEC, "dtype": "auto"}).dtype == "float32"
    monkeypatch.setattr(cpu_arithmetic, "cpu_flags", lambda: {"amx_bf16": True})
    assert load_generator(tiny_model, {**CPU_SPEC, "dtype": "auto"}).dtype == "bfloat16"
    # A CPU run is never served a GPU run's output, nor the other way round.
    assert gen.store_key_extras() == {"vllm": "0.33.0", "device": "cpu"}
    assert load_generator(tiny_model, SPEC).store_key_extras() == {"vllm": "0.33.0", "tensor_parallel_size": 2}
    gen.generate([gen.render("paris")], max_new_tokens=4)
    assert (
        standin.calls["engine"]["kv_cache_memory_bytes"] == 2 << 30 and standin.calls["engine"]["enforce_eager"] is True
    )
    assert "gpu_memory_utilization" not in standin.calls["engine"]


def test_stop_strings_that_begin_with_whitespace_are_applied_after_the_engine(tiny_model, standin):
    """vLLM would stop inside the whitespace an answer begins with; cut_answer never looks there."""
    gen = load_generator(tiny_model, SPEC)
    gen.generate([gen.render("paris")], max_new_tokens=4, stop=["\n", "\nQuestion:", " x", "Question:", "."])
    assert standin.calls["sampling"]["stop"] == ["Question:", "."]


@pytest.mark.parametrize(
    ("gpu", "platform", "message"),
    [
        (
            0,
            "cuda",
            r"llms\.tiny\.gpu is 0, which runs vLLM's CPU backend, but the installed vLLM 0\.33\.0 is built for cuda",
        ),
        (2, "cpu", r"llms\.tiny\.gpu is 2, but the installed vLLM 0\.33\.0 is the CPU build"),
    ],
)
def test_a_build_for_other_devices_than_the_spec_names_the_key(
    tiny_model, standin, monkeypatch, gpu, platform, message
):
    current = types.SimpleNamespace(is_cpu=lambda: platform == "cpu", device_type=platform)
    monkeypatch.setitem(sys.modules, "vllm.platforms", types.SimpleNamespace(current_platform=current))
    for name in CPU_ENV:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=message):
        load_generator(tiny_model, {**SPEC, "gpu": gpu})


# A job script as Snakemake runs one (no __main__ guard) that starts a spawned child, as vLLM does.
JOB = """
import multiprocessing, os, sys
with open(sys.argv[1], "a") as fh:
    fh.write("job ran\\n")
from llm_utility.generation.vllm_backend import _main_script_hidden
hide = _main_script_hidden() if sys.argv[2] == "hidden" else __import__("contextlib").nullcontext()
with hide:
    child = multiprocessing.get_context("spawn").Process(target=os.getpid)
    child.start()
    child.join()
print(child.exitcode)
"""


@pytest.mark.parametrize("mode", ["hidden", "visible"])
def test_a_spawned_worker_never_reruns_the_job_script(tmp_path, mode):
    script, counter = tmp_path / "job.py", tmp_path / "runs.txt"
    script.write_text(JOB)
    out = subprocess.run(
        [sys.executable, str(script), str(counter), mode], capture_output=True, text=True, env=CHILD_ENV, timeout=120
    )
    runs = counter.read_text().count("job ran")
    if mode == "hidden":
        assert out.returncode == 0 and out.stdout.strip() == "0" and runs == 1, out.stderr
    else:  # what the hiding prevents: the child re-ran the whole script before failing
        assert runs == 2
