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
import logging
import os
import sys
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
            "Run the workflow with --sdm conda (envs/llm-vllm.yaml), `pip install 'llm-utility[vllm]'` "
            "in a separate GPU environment, or set the model's backend to 'transformers'."
        ) from error
    return vllm


def engine_kwargs(load_path: str, spec: Mapping[str, Any], dtype: str) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` (each one a field of ``vllm.EngineArgs``) for a normalized spec.

    ``load_path`` is the materialized local folder, so no revision is passed: the folder is the
    pinned commit. ``max_model_len`` and ``max_num_seqs`` are passed only when set (vLLM's own
    defaults otherwise: the model's context length, and its batch size for the GPU).
    """
    kwargs: dict[str, Any] = {
        "model": load_path,
        "tensor_parallel_size": max(1, int(spec["gpu"])),
        "dtype": dtype,
        "enable_prefix_caching": True,  # RAG prompts share long prefixes (instructions, passages)
        "seed": 0,
    }
    if spec.get("gpu_memory_utilization") is not None:
        kwargs["gpu_memory_utilization"] = float(spec["gpu_memory_utilization"])
    if spec.get("max_model_len"):
        kwargs["max_model_len"] = int(spec["max_model_len"])
    if spec.get("max_num_seqs"):
        kwargs["max_num_seqs"] = int(spec["max_num_seqs"])
    return kwargs


def sampling_kwargs(max_new_tokens: int, stop: Sequence[str] = ()) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams``: greedy decoding, cut at the stop strings."""
    stop = [s for s in stop if s]
    return {"temperature": 0.0, "max_tokens": int(max_new_tokens), "stop": stop or None}


def scoring_sampling_kwargs(prompt_logprobs: int = 0) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams`` that score a prompt instead of continuing it.

    ``prompt_logprobs=0`` returns the log-probability of each prompt token as it is (1 adds the top
    alternative); one greedy token is generated because vLLM generates at least one.
    """
    return {"temperature": 0.0, "max_tokens": 1, "prompt_logprobs": int(prompt_logprobs)}


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


class VLLMGenerator(Generator):
    """A model served by ``vllm.LLM`` on the GPUs in ``CUDA_VISIBLE_DEVICES`` (see ``llm_utility.gpu``).

    Prompts are tokenized here, with the same rule as the transformers backend (BOS exactly once),
    and handed to vLLM as token ids: given a string, vLLM would add a second BOS to chat prompts
    whose template already writes one (Llama 3).
    """

    backend = "vllm"

    def __init__(self, manifest: Mapping[str, Any], spec: Mapping[str, Any]) -> None:
        super().__init__(manifest, spec)
        # Before vLLM is imported: it reads these when it starts processes and at start-up.
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = START_METHOD
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")  # compute nodes are often offline
        self._vllm = _import_vllm()
        from transformers import AutoTokenizer  # vLLM's own dependency, same tokenizer it loads

        # vLLM's own "auto" means the checkpoint's dtype; ours means bfloat16 on a GPU.
        self.dtype = "bfloat16" if self.spec["dtype"] in (None, "auto") else self.spec["dtype"]
        self.tokenizer = AutoTokenizer.from_pretrained(self.load_path)

    @property
    def loaded(self) -> bool:
        """Whether the engine is up (rendering and counting tokens need only the tokenizer)."""
        return "llm" in self.__dict__

    @functools.cached_property
    def llm(self) -> Any:
        """The vLLM engine, started on the first ``generate``: a job whose prompts the generation
        store already holds never spends minutes loading weights onto its GPUs."""
        with _main_script_hidden():
            return self._vllm.LLM(**engine_kwargs(self.load_path, self.spec, self.dtype))

    def store_key_extras(self) -> dict[str, Any]:
        """The vLLM release and the tensor-parallel size: both can change greedy outputs."""
        return {
            "vllm": getattr(self._vllm, "__version__", "unknown"),
            "tensor_parallel_size": engine_kwargs(self.load_path, self.spec, self.dtype)["tensor_parallel_size"],
        }

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = ()) -> list[str]:
        """Greedy continuations of ``prompts``; vLLM schedules the whole list itself.

        vLLM stops at the first occurrence of a stop string even before any answer text, so
        whitespace-only stop strings (``"\\n"``) are not given to it: they are applied afterwards by
        ``cut_answer``, which lets an answer begin with a newline (at the cost of decoding up to
        ``max_new_tokens``). Other stop strings stop the engine as usual.
        """
        if not prompts:
            return []
        stop = [s for s in stop if s]
        engine_stop = [s for s in stop if s.strip()]
        params = self._vllm.SamplingParams(**sampling_kwargs(max_new_tokens, engine_stop))
        requests = [{"prompt_token_ids": self.encode(p)} for p in prompts]
        with _main_script_hidden():
            results = self.llm.generate(requests, params, use_tqdm=False)
        # vLLM returns results in input order.
        return [cut_answer(r.outputs[0].text, stop) for r in results]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        """Log-probability of each target token after its prompt, from vLLM's prompt log-probs, with
        the transformers backend's convention (``HFGenerator.score``).

        Each pair is one request of prompt ids + target ids (``scoring_sampling_kwargs``: the actual
        token's log-probability is always included) and one generated token, which is discarded.
        vLLM's ``prompt_logprobs`` has one entry per prompt token, entry i holding the log-probability
        of token i given tokens 0..i-1, and None for token 0, which nothing predicts: after an empty
        prompt without a BOS token the first target token is not scored.
        """
        if not pairs:
            return []
        prompts = [self.encode(p) for p, _ in pairs]
        targets = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for _, t in pairs]
        sequences = [p + t for p, t in zip(prompts, targets)]
        # vLLM rejects an empty prompt; a sequence of one token has nothing to score either.
        asked = [i for i, ids in enumerate(sequences) if len(ids) > 1]
        params = self._vllm.SamplingParams(**scoring_sampling_kwargs(prompt_logprobs=1))
        results = {}
        if asked:
            with _main_script_hidden():
                done = self.llm.generate([{"prompt_token_ids": sequences[i]} for i in asked], params, use_tqdm=False)
            results = dict(zip(asked, done))
        scores = []
        for i, (prompt, ids) in enumerate(zip(prompts, sequences)):
            if i not in results:
                scores.append([])
                continue
            logprobs = results[i].prompt_logprobs
            first = max(len(prompt), 1)
            scores.append([logprobs[j][ids[j]].logprob for j in range(first, len(ids))])
        return scores

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
