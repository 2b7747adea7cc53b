"""The vLLM backend, for GPUs: greedy decoding with prefix caching and tensor parallelism.

vLLM is imported when a generator is built, never at module import, so the rest of the library (and
this module) imports in environments without it. It lives in its own environment
(``envs/llm-vllm.yaml``): vLLM pins its own torch and a transformers older than the CPU demo's.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from .models import Generator, cut_answer


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


class VLLMGenerator(Generator):
    """A model served by ``vllm.LLM`` on the GPUs in ``CUDA_VISIBLE_DEVICES`` (see ``llm_utility.gpu``).

    Prompts are tokenized here, with the same rule as the transformers backend (BOS exactly once),
    and handed to vLLM as token ids: given a string, vLLM would add a second BOS to chat prompts
    whose template already writes one (Llama 3).
    """

    backend = "vllm"

    def __init__(self, manifest: Mapping[str, Any], spec: Mapping[str, Any]) -> None:
        super().__init__(manifest, spec)
        self._vllm = _import_vllm()
        from transformers import AutoTokenizer  # vLLM's own dependency, same tokenizer it loads

        self.dtype = self.spec["dtype"] or "bfloat16"
        self._revision = manifest.get("revision")
        self.tokenizer = AutoTokenizer.from_pretrained(self.load_path, revision=self._revision)

    @property
    def loaded(self) -> bool:
        """Whether the engine is up (rendering and counting tokens need only the tokenizer)."""
        return "llm" in self.__dict__

    @functools.cached_property
    def llm(self) -> Any:
        """The vLLM engine, started on the first ``generate``: a job whose prompts the generation
        store already holds never spends minutes loading weights onto its GPUs."""
        kwargs: dict[str, Any] = {}
        if self.spec["max_model_len"]:
            kwargs["max_model_len"] = int(self.spec["max_model_len"])
        if self._revision:
            kwargs["revision"] = self._revision
        return self._vllm.LLM(
            model=self.load_path,
            tensor_parallel_size=max(1, int(self.spec["gpu"])),
            dtype=self.dtype,
            enable_prefix_caching=True,  # RAG prompts share long prefixes (instructions, passages)
            seed=0,
            **kwargs,
        )

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
        params = self._vllm.SamplingParams(temperature=0.0, max_tokens=int(max_new_tokens), stop=engine_stop or None)
        requests = [{"prompt_token_ids": self.encode(p)} for p in prompts]
        results = self.llm.generate(requests, params, use_tqdm=False)
        # vLLM returns results in input order.
        return [cut_answer(r.outputs[0].text, stop) for r in results]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        """Log-probability of each target token after its prompt, from vLLM's prompt log-probs.

        Each pair is one request of prompt ids + target ids with ``prompt_logprobs=1`` (the actual
        token's log-probability is always included) and one generated token, which is discarded.
        """
        if not pairs:
            return []
        prompts = [self.encode(p) for p, _ in pairs]
        targets = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for _, t in pairs]
        params = self._vllm.SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1)
        requests = [{"prompt_token_ids": p + t} for p, t in zip(prompts, targets)]
        results = self.llm.generate(requests, params, use_tqdm=False)
        scores = []
        for result, prompt, target in zip(results, prompts, targets):
            logprobs = result.prompt_logprobs  # one entry per prompt token; None for the first
            first = len(prompt) if prompt else 1
            ids = prompt + target
            scores.append([logprobs[i][ids[i]].logprob for i in range(first, len(ids))])
        return scores

    def close(self) -> None:
        """Shut the engine down so its GPU memory is free before the device lease ends."""
        llm = self.__dict__.pop("llm", None)
        if llm is None:
            return
        del llm
        import gc

        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass
