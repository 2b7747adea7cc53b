"""The transformers backend: greedy generation, target scoring and attention, on a CPU or CUDA.

On a CPU every call goes through the engine of ``hf_engine`` (each prompt prefilled alone, shared
prefixes reused in int8, many rows decoded at once) in the arithmetic ``cpu_arithmetic.resolve_dtype``
chose; on CUDA, prompts are batched with left padding and decoded by transformers' ``generate``."""

from __future__ import annotations

import copy
import functools
import gc
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, StoppingCriteria, StoppingCriteriaList

from .cpu_arithmetic import (
    BFLOAT16_RECIPE,
    CALIBRATION_TEXT,
    INT8_RECIPE,
    bfloat16_packing_supported,
    fix_step_rows,
    output_vocabulary,
    pack_bfloat16_linears,
    quantize_linears,
    resolve_dtype,
    shortlist_output_layer,
    torch_dtype,
)
from .generator import Generator, cut_answer, length_batches
from .hf_engine import (
    BLOCKED_ATTENTION,
    CPU_ENGINE,
    PREFIX_CACHE_BYTES,
    ROWWISE_ATTENTION,
    PrefixCache,
    Workspace,
    greedy_generate,
    prefill,
)

__all__ = ["HFGenerator", "resolve_dtype"]

log = logging.getLogger("llm_utility")

# The most memory one scoring batch's logits may take (rows x kept positions x vocabulary x 4 bytes):
# a passage's perplexity keeps every one of its positions, and Gemma's vocabulary has 262k tokens.
SCORE_LOGITS_BYTES = 1 << 30


class _StopOnText(StoppingCriteria):
    """Finish each row once its generated text (prompt excluded), past any leading whitespace,
    contains a stop string (the rule of ``cut_answer``).

    Decoding the few new tokens every step is cheap, and it matches exactly the cut applied to the
    output afterwards and vLLM's semantics. transformers' own ``stop_strings`` scans the whole
    vocabulary per ``generate`` call (costly with Gemma's 262k tokens) and also matches across the
    prompt boundary.
    """

    def __init__(self, tokenizer: Any, stop: Sequence[str], prompt_width: int) -> None:
        self.tokenizer, self.stop, self.prompt_width = tokenizer, list(stop), prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_width :], skip_special_tokens=True)
        hit = [any(s in t.lstrip() for s in self.stop) for t in texts]
        return torch.tensor(hit, dtype=torch.bool, device=input_ids.device)


class HFGenerator(Generator):
    """A causal LM loaded with transformers from the manifest's ``load_path``.

    On a CPU it runs in the arithmetic ``resolve_dtype`` picks (``dtype: auto``: bfloat16 or float32 by
    the CPU's flags; ``null``: float32) through the engine of ``hf_engine``, whose prefix cache lives
    as long as the generator; with CUDA it defaults to bfloat16 and spreads the model over the
    visible devices (``device_map="auto"``).
    """

    backend = "transformers"

    def __init__(self, manifest: Mapping[str, Any], spec: Mapping[str, Any], threads: int | None = None) -> None:
        super().__init__(manifest, spec)
        if threads:
            torch.set_num_threads(int(threads))
        cuda = torch.cuda.is_available()
        self.dtype = resolve_dtype(self.spec["dtype"], cuda)
        self._cuda = cuda
        # Prefixes are reused in int8 only, where a prompt computed after one is bitwise the whole
        # prompt's (hf_engine's docstring). In float32 and bfloat16 the suffix is a product of fewer
        # rows, and GEMM kernels round by row count (``StepRows``): a prompt's result would depend on
        # which prompts were computed before it.
        self._exact_prefixes = not cuda and self.dtype == "int8"
        self._prefixes = PrefixCache(max_bytes=PREFIX_CACHE_BYTES if self._exact_prefixes else 0)
        self._workspace = Workspace()
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
        started = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(
            self.load_path,
            dtype=torch_dtype(self.dtype),
            device_map="auto" if self._cuda else None,
        )
        model.eval()
        loaded = time.perf_counter()
        if self.dtype == "int8":
            quantize_linears(model, self.encode(CALIBRATION_TEXT))
        if self._packs_bfloat16:
            pack_bfloat16_linears(model)
        if not self._cuda:
            fix_step_rows(model)
            if self.dtype == "int8":
                shortlist_output_layer(model)
            # the blocks that make a reused prefix exact
            model.set_attn_implementation(BLOCKED_ATTENTION if self._exact_prefixes else ROWWISE_ATTENTION)
        log.info(
            "%s: weights loaded in %.1f s%s",
            self.slug,
            loaded - started,
            f", int8 in {time.perf_counter() - loaded:.1f} s" if self.dtype == "int8" else "",
        )
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

    def store_key_extras(self) -> dict[str, Any]:
        """On a CPU, the engine's numerics (``hf_engine.CPU_ENGINE``) and the recipes of int8
        (``cpu_arithmetic.Int8RowLinear``) and packed bfloat16 (``PackedBfloat16Linear``) are this
        project's own: their versions are in the key."""
        if self._cuda:
            return {}
        recipe = {"int8": INT8_RECIPE} if self.dtype == "int8" else {}
        if self._packs_bfloat16:
            recipe = {"bfloat16": BFLOAT16_RECIPE}
        return {"cpu_engine": CPU_ENGINE, **recipe}

    @functools.cached_property
    def _packs_bfloat16(self) -> bool:
        """bfloat16 on a CPU multiplies with weights packed once (``PackedBfloat16Linear``) where oneDNN can."""
        return not self._cuda and self.dtype == "bfloat16" and bfloat16_packing_supported()

    def close(self) -> None:
        """Drop the weights and return the CUDA memory torch cached for them (see ``gpu.lease_gpus``)."""
        self._prefixes.clear()
        self._workspace.clear()
        if self.__dict__.pop("model", None) is None:
            return
        gc.collect()
        if self._cuda:
            torch.cuda.empty_cache()

    def _pad(self, ids: list[list[int]]) -> dict[str, torch.Tensor]:
        """Left-pad token id lists into a batch; every row ends at the same position."""
        width = max(len(x) for x in ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids], dtype=torch.long)
        device = self.model.device
        return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = ()) -> list[str]:
        """Greedy continuations of ``prompts``, outputs in their order. On a CPU through the engine
        (``hf_engine.greedy_generate``); on CUDA in left-padded batches of at most the spec's
        ``batch_size`` rows of similar lengths (``length_batches``)."""
        ids = [self.encode(p) for p in prompts]  # each prompt encoded on its own (see ``encode``)
        if not self._cuda:
            return self._generate_cpu(ids, max_new_tokens, stop)
        outputs: list[str] = [""] * len(prompts)
        for rows in length_batches([len(x) for x in ids], self.batch_size):
            for row, text in zip(rows, self._generate_batch([ids[r] for r in rows], max_new_tokens, stop), strict=True):
                outputs[row] = text
        return outputs

    def _generate_cpu(self, ids: list[list[int]], max_new_tokens: int, stop: Sequence[str]) -> list[str]:
        stop = [s for s in stop if s]
        decode = functools.partial(self.tokenizer.decode, skip_special_tokens=True)

        def finished(tokens: list[int]) -> bool:  # the rule of _StopOnText and cut_answer
            return bool(stop) and any(s in decode(tokens).lstrip() for s in stop)

        model = self.model  # loads the weights (and the greedy config) on first use
        eos = self._gen_config.eos_token_id
        eos = set(eos if isinstance(eos, list | tuple) else [] if eos is None else [eos])
        tokens = greedy_generate(model, ids, int(max_new_tokens), eos, finished, self._prefixes, self._workspace)
        return [cut_answer(decode(t), stop) for t in tokens]

    @torch.inference_mode()
    def _generate_batch(self, ids: list[list[int]], max_new_tokens: int, stop: Sequence[str]) -> list[str]:
        model = self.model  # loads the weights (and the greedy config) on first use
        batch = self._pad(ids)
        stop = [s for s in stop if s]
        config = copy.deepcopy(self._gen_config)
        config.max_new_tokens = int(max_new_tokens)
        width = batch["input_ids"].shape[1]
        criteria = StoppingCriteriaList([_StopOnText(self.tokenizer, stop, width)] if stop else [])
        out = model.generate(**batch, generation_config=config, stopping_criteria=criteria)
        new = out[:, width:]
        texts = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        return [cut_answer(t, stop) for t in texts]

    # -- scoring -------------------------------------------------------------------------------------

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        """Log-probability of each token of ``target`` after the rendered ``prompt`` (teacher forcing),
        batched like ``generate`` by the length of prompt and target together.

        The prompt is encoded as ``encode`` does (the tokenizer's own special tokens, BOS once), the
        target on its own without special tokens, and the target's ids follow the prompt's, as they
        would in generation. Every target token with a token before it is scored: all of them after
        a non-empty prompt, and after an empty one with a BOS token (``encode("")`` is ``[BOS]``);
        after an empty prompt without a BOS token (SmolLM2, Qwen3) the first target token has no
        context and is not scored, so its list is one shorter than the target.
        """
        if not self._cuda:
            return [self._score_one(prompt, target) for prompt, target in pairs]
        prompt_lengths = self.count_tokens([p for p, _ in pairs])
        target_lengths = self.count_tokens([t for _, t in pairs], special=False)
        lengths = [a + b for a, b in zip(prompt_lengths, target_lengths, strict=True)]
        out: list[list[float]] = [[] for _ in pairs]
        for rows in length_batches(lengths, self.batch_size):
            for row, logprobs in zip(rows, self._score_batch([pairs[r] for r in rows]), strict=True):
                out[row] = logprobs
        return out

    @torch.inference_mode()
    def _score_one(self, prompt: str, target: str) -> list[float]:
        """One pair on the CPU engine: prompt and target run alone, after the longest cached prefix."""
        prompt_ids = self.encode(prompt)
        target_ids = self.tokenizer(target, add_special_tokens=False)["input_ids"]
        scored = min(len(target_ids), len(prompt_ids) + len(target_ids) - 1)
        if scored <= 0:
            return []
        _, logits = prefill(self.model, prompt_ids + target_ids, self._prefixes, keep=scored + 1)
        # Kept position j predicts the token after it: the last `scored` target tokens.
        predicting = torch.log_softmax(logits[:-1].float(), dim=-1)
        tokens = torch.tensor(target_ids[len(target_ids) - scored :], device=predicting.device)
        return predicting.gather(-1, tokens[:, None])[:, 0].tolist()

    @torch.inference_mode()
    def _score_batch(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        if not pairs:
            return []
        model = self.model
        prompts = [self.encode(p) for p, _ in pairs]
        targets = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for _, t in pairs]
        # Scored tokens per row: the target's, less a first token that has nothing before it.
        scored = [min(len(t), len(p) + len(t) - 1) for p, t in zip(prompts, targets)]
        if max(scored) <= 0:
            return [[] for _ in pairs]
        # Rows end together, so a row's n scored tokens are predicted by the logits at its positions
        # width-1-n .. width-2: only the last (most scored + 1) positions need logits, which matters
        # with Gemma's 262k vocabulary. This window is never wider than the batch, so kept index j
        # is position width - keep + j in every row.
        keep = max(scored) + 1
        vocab = output_vocabulary(model)
        if len(pairs) > 1 and len(pairs) * keep * vocab * 4 > SCORE_LOGITS_BYTES:
            half = len(pairs) // 2
            return self._score_batch(pairs[:half]) + self._score_batch(pairs[half:])
        batch = self._pad([p + t for p, t in zip(prompts, targets)])
        # Left padding shifts each row; explicit positions keep every row as it is when unpadded.
        positions = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        logits = model(**batch, position_ids=positions, logits_to_keep=keep).logits
        if logits.shape[1] != keep:
            raise RuntimeError(f"{self.slug}: asked for the last {keep} positions' logits, got {logits.shape[1]}")
        results = []
        for row, (target, n) in enumerate(zip(targets, scored)):
            if n <= 0:
                results.append([])
                continue
            # Logits at kept index j predict the token at kept index j + 1.
            predicting = torch.log_softmax(logits[row, keep - 1 - n : keep - 1, :].float(), dim=-1)
            tokens = torch.tensor(target[len(target) - n :], device=predicting.device)
            results.append(predicting.gather(-1, tokens[:, None])[:, 0].tolist())
        return results

    # -- attention -----------------------------------------------------------------------------------

    def attention(self, requests: Sequence[Any], pooling: str = "mean") -> list[list[float]]:
        """Eq. 6 of the paper, per request: the attention mass the answer's tokens put on each passage.

        The answer (the model's own, generated for this very prompt) is appended to the prompt and
        run once with eager attention (teacher forcing gives the decoding steps' attention rows
        exactly). Decoding step t is the query position that produces answer token t: the last
        prompt token for t = 1, answer token t - 1 after that. For every layer and head, the weights
        of that row on the tokens of passage i are summed (alpha_t(d_i)); heads and layers are pooled
        by their mean (``pooling="mean"``, the only pooling so far); steps are averaged (1/T sum_t);
        and the passages' values are normalized to sum to 1. A token straddling two spans counts for
        both. An empty answer has one step: the row that produced the end of the answer.
        """
        if pooling != "mean":
            raise ValueError(f"attention pooling {pooling!r} is not implemented (use 'mean')")
        return [self._attention_one(r) for r in requests]

    @torch.inference_mode()
    def _attention_one(self, request: Any) -> list[float]:
        model = self.model
        prompt_ids, spans = self._token_spans(request.prompt, request.spans)
        answer_ids = self.tokenizer(request.answer, add_special_tokens=False)["input_ids"]
        ids = prompt_ids + answer_ids[:-1]
        mass = _PassageMass(
            rows=torch.arange(len(prompt_ids) - 1, len(ids)),
            masks=_span_masks(len(ids), spans),
        )
        layers = [m for name, m in model.named_modules() if name.endswith("self_attn")]
        if not layers:
            raise RuntimeError(f"{self.slug}: no self_attn modules found to read attention from")
        previous = model.config._attn_implementation
        model.set_attn_implementation("eager")
        handles = [m.register_forward_hook(mass) for m in layers]
        try:
            # With device_map="auto" the layers sit on several devices: the ids go to the embedding's.
            # One position's logits: the masses are read in the layers, and every position's logits
            # would be Gemma 3's 262k-row output layer times the whole prompt (~0.5 s a call).
            device = model.get_input_embeddings().weight.device
            model(input_ids=torch.tensor([ids]).to(device), use_cache=False, logits_to_keep=1)
        finally:
            for h in handles:
                h.remove()
            model.set_attn_implementation(previous)
        if mass.layers != len(layers):
            raise RuntimeError(f"{self.slug}: attention read from {mass.layers} of {len(layers)} layers")
        alpha = mass.total / mass.layers  # layer mean: (steps, passages), on the CPU
        utility = alpha.mean(0)  # Eq. 6: the average over decoding steps
        total = float(utility.sum())
        return [float(u) / total if total > 0 else 0.0 for u in utility]

    def _token_spans(self, prompt: str, spans: Sequence[Sequence[int]]) -> tuple[list[int], list[tuple[int, int]]]:
        """The prompt's token ids (as ``encode`` makes them) and, per character span, the token range
        [first, last + 1) of the tokens overlapping it."""
        ids = self.encode(prompt)
        bos = getattr(self.tokenizer, "bos_token", None)
        add = not (bos and prompt.startswith(bos))
        enc = self.tokenizer(prompt, add_special_tokens=add, return_offsets_mapping=True)
        if enc["input_ids"] != ids:
            raise RuntimeError(f"{self.slug}: tokenizing with offsets changed the prompt's tokens")
        offsets = enc["offset_mapping"]
        token_spans = []
        for start, end in spans:
            inside = [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
            if not inside:
                raise ValueError(f"{self.slug}: the character span {start}-{end} covers no token of the prompt")
            token_spans.append((inside[0], inside[-1] + 1))
        return ids, token_spans


def _span_masks(n_tokens: int, spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """(tokens, passages) float32: 1 where token t lies in passage j's token range."""
    masks = torch.zeros(n_tokens, len(spans), dtype=torch.float32)
    for j, (lo, hi) in enumerate(spans):
        masks[lo:hi, j] = 1.0
    return masks


class _PassageMass:
    """Forward hook of every attention layer: the attention mass that the decoding steps' rows put
    on each passage, mean over heads, summed over layers (``total``, on the CPU).

    With ``device_map="auto"`` the layers of a large model sit on several GPUs and each layer's
    attention weights on its own one, so the row indices and passage masks are copied to each
    device once, when a layer there first calls; only the small (steps, passages) result moves.
    """

    def __init__(self, rows: torch.Tensor, masks: torch.Tensor) -> None:
        self._rows, self._masks = rows, masks  # on the CPU
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self.total: torch.Tensor | None = None
        self.layers = 0

    def _local(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device not in self._on_device:
            self._on_device[device] = (self._rows.to(device), self._masks.to(device))
        return self._on_device[device]

    def __call__(self, _module: Any, _args: Any, output: Any) -> None:
        weights = output[1]  # (batch, heads, queries, keys): eager attention returns them
        if weights is None:
            raise RuntimeError("attention weights are not returned: the model must run with eager attention")
        rows, masks = self._local(weights.device)
        # alpha_t(d_i) per head: the answer rows' weights summed over each passage's tokens.
        mass = (weights[0, :, rows, :].float() @ masks).mean(0).to("cpu")  # (steps, passages), head mean
        self.total = mass if self.total is None else self.total + mass
        self.layers += 1
