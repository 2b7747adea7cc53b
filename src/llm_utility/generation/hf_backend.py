"""The transformers backend: batched, left-padded greedy generation on CPU or CUDA."""

from __future__ import annotations

import copy
import functools
import gc
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, StoppingCriteria, StoppingCriteriaList

from .models import Generator, truncate_at_stop

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class _StopOnText(StoppingCriteria):
    """Finish each row once its generated text (prompt excluded) contains a stop string.

    Decoding the few new tokens every step is cheap, and it matches exactly the cut applied to the
    output afterwards and vLLM's semantics. transformers' own ``stop_strings`` scans the whole
    vocabulary per ``generate`` call (0.5 s for Gemma's 262k tokens) and also matches across the
    prompt boundary.
    """

    def __init__(self, tokenizer: Any, stop: Sequence[str], prompt_width: int) -> None:
        self.tokenizer, self.stop, self.prompt_width = tokenizer, list(stop), prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width :], skip_special_tokens=True)
        hit = [any(s in t for s in self.stop) for t in texts]
        return torch.tensor(hit, dtype=torch.bool, device=input_ids.device)


class HFGenerator(Generator):
    """A causal LM loaded with transformers from the manifest's ``load_path``.

    On CPU it runs in float32 (bfloat16 matmuls are slow on most CPUs); with CUDA it defaults to
    bfloat16 and spreads the model over the visible devices (``device_map="auto"``).
    """

    backend = "transformers"

    def __init__(self, manifest: Mapping[str, Any], spec: Mapping[str, Any], threads: int | None = None) -> None:
        super().__init__(manifest, spec)
        if threads:
            torch.set_num_threads(int(threads))
        cuda = torch.cuda.is_available()
        self.dtype = self.spec["dtype"] or ("bfloat16" if cuda else "float32")
        self._cuda = cuda
        # load_path is a local folder (materialize put every model on disk): no revision to ask for.
        self.tokenizer = AutoTokenizer.from_pretrained(self.load_path)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory (rendering and counting tokens need only the tokenizer)."""
        return "model" in self.__dict__

    @functools.cached_property
    def model(self) -> Any:
        """The weights, loaded on the first ``generate``: a job whose prompts the generation store
        already holds never pays for them."""
        model = AutoModelForCausalLM.from_pretrained(
            self.load_path,
            dtype=_DTYPES[self.dtype],
            device_map="auto" if self._cuda else None,
        )
        model.eval()
        base = model.generation_config
        # A fresh config, not the model's: Qwen3 and others ship sampling defaults (temperature,
        # top_p) that would warn, or worse, leak into what must be plain greedy decoding.
        self._gen_config = GenerationConfig(
            do_sample=False,
            num_beams=1,
            bos_token_id=base.bos_token_id,
            eos_token_id=base.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        return model

    def close(self) -> None:
        """Drop the weights and return the CUDA memory torch cached for them (see ``gpu.lease_gpus``)."""
        if self.__dict__.pop("model", None) is None:
            return
        gc.collect()
        if self._cuda:
            torch.cuda.empty_cache()

    def _batch(self, prompts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Left-padded ids and attention mask; each prompt encoded on its own (see ``encode``)."""
        ids = [self.encode(p) for p in prompts]
        width = max(len(x) for x in ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids], dtype=torch.long)
        device = self.model.device
        return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = ()) -> list[str]:
        """Greedy continuations of ``prompts``, in chunks of the spec's ``batch_size``."""
        outputs: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            outputs += self._generate_batch(prompts[start : start + self.batch_size], max_new_tokens, stop)
        return outputs

    @torch.inference_mode()
    def _generate_batch(self, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str]) -> list[str]:
        if not prompts:
            return []
        model = self.model  # loads the weights (and the greedy config) on first use
        batch = self._batch(prompts)
        stop = [s for s in stop if s]
        config = copy.deepcopy(self._gen_config)
        config.max_new_tokens = int(max_new_tokens)
        width = batch["input_ids"].shape[1]
        criteria = StoppingCriteriaList([_StopOnText(self.tokenizer, stop, width)] if stop else [])
        out = model.generate(**batch, generation_config=config, stopping_criteria=criteria)
        new = out[:, width:]
        texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        return [truncate_at_stop(t, stop).strip() for t in texts]
