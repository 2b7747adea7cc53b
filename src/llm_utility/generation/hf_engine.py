"""The CPU engine of the transformers backend: each prompt prefilled on its own, then greedy
decoding of many rows at once, each row leaving the batch when it finishes.

Why this shape (measured in docs/performance.md, "The CPU engine"):

- **Prefill alone, no padding.** On a CPU a prompt of 35-600 tokens is already a large enough matrix
  for the GEMMs, so batching prompts for prefill gains nothing and padding them costs real work. A
  prompt computed alone is also computed the same way whatever else the job asks: its result does
  not depend on a batch, which the generation store's keys (prompt, not batch) require.
- **Decode many rows at once, each as if alone.** A decoding step reads every weight once for
  however many rows, so the rows of all the prompts of a call (up to a memory budget) decode
  together, and a row that stops (end of sequence, a stop string, the token limit) leaves the batch
  at once. Each step's linear layers multiply in fixed blocks of rows (``cpu_arithmetic.StepRows``)
  and each row attends to its own keys only (``ROWWISE_ATTENTION``), so a row's tokens are bitwise
  those it gets alone: GEMM kernels round by row count, and a padded row's reductions group
  differently (13 of 79 demo answers of SmolLM2 in bfloat16 changed with their batch before).
- **Prefixes, reused exactly in int8** (``PrefixCache``): causal attention makes a prefix's keys and
  values independent of what follows, so ``prefill`` can start after the keys and values of an
  earlier prompt with the same first tokens. The result must be bitwise the whole prompt's (the
  store keys a call without the job's earlier prompts), and a float GEMM rounds by its number of
  rows. In int8 the layers' integer products are exact and quantize each row alone; what is left in
  float32 (attention, the outlier channels) runs in blocks of ``PREFILL_ROWS`` positions counted from
  the prompt's first token (``BLOCKED_ATTENTION``, ``StepRows``), and a reused prefix is a whole
  number of blocks, so every block is the same product with or without it. In float32 and
  bfloat16 the cache holds nothing.
"""

from __future__ import annotations

import functools
import inspect
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .cpu_arithmetic import STEP_ROWS, argmax_only

# Keys and values of earlier prompts kept for their prefixes, per generator (bytes): ~45 prompts of
# 250 tokens of SmolLM2's or Gemma 3's, enough for the prompts of a job that share a template or a question.
PREFIX_CACHE_BYTES = 1 << 29
# The most memory the keys and values of one decoding batch may take (rows x padded length).
DECODE_CACHE_BYTES = 1 << 30
# A prompt's positions per block of its attention and float32 outlier products; a reused prefix is a
# whole number of blocks (see the module's docstring). The outlier channels' blocks are StepRows'.
PREFILL_ROWS = STEP_ROWS

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys and values, (1, heads, tokens, dim)


def kv_bytes(kv: KV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


ROWWISE_ATTENTION = "llm_utility_rowwise_sdpa"
BLOCKED_ATTENTION = "llm_utility_rowwise_sdpa_prefill_blocks"
# Bump when the engine's numerics change (how products are blocked, what is reused): it is part of
# the generation-store key of every CPU call, so a store never serves another engine's outputs.
CPU_ENGINE = "prefill-whole-or-int8-blocks-16-exact-prefixes-step-rows-16-vocabulary-slices-2mib-rowwise-attention-v3"


def _rowwise_sdpa(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, but a decoding step (one query per row) attends row by row to
    that row's own keys only, as it would alone.

    Batched, a row's keys sit behind the padding of shorter rows and the kernel's reductions group
    them differently; a few rounding steps then change a bfloat16 hidden state, and with it,
    sometimes, a greedy token. Alone or in any batch, a row here is the same product of the same
    tensors. A prompt's tokens (several queries, one row) go to SDPA as they are."""
    if query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    batch, keys = query.shape[0], key.shape[2]
    starts, ends = [0] * batch, [keys] * batch
    if attention_mask is not None:  # (batch, 1, 1, keys), True where attended: one contiguous run
        allowed = attention_mask[:, 0, 0].to(torch.int8)
        starts = allowed.argmax(dim=1).tolist()  # the first True (argmax takes the first largest)
        ends = (keys - allowed.flip(1).argmax(dim=1)).tolist()
    rows = []
    for b, start, end in zip(range(batch), starts, ends, strict=True):
        out, _ = sdpa_attention_forward(
            module, query[b : b + 1], key[b : b + 1, :, start:end], value[b : b + 1, :, start:end], None, **kwargs
        )
        rows.append(out)
    return torch.cat(rows), None


def _blocked_sdpa(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """``_rowwise_sdpa``, but a prompt's queries attend in blocks of ``PREFILL_ROWS`` positions
    counted from its first token, each block to the keys up to its last position, under a boolean
    mask.

    SDPA's CPU kernel multiplies its queries in blocks sized by how many there are, and a row's
    scores round by its block's size (the last 2 of 18 positions after a cached prefix of 144 came
    out 4e-7 off the whole prompt's, measured). With the blocks fixed by position, a prompt's block
    is the same product whether the positions before it were computed in this call or reused. The
    blocks call torch's SDPA directly, with grouped key-value heads as they are (``enable_gqa``):
    transformers' wrapper would copy the keys for every head of every block."""
    if query.shape[2] == 1:
        return _rowwise_sdpa(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    if kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None:
        name = type(module).__name__
        raise ValueError(f"{name}: the CPU engine's attention has no logit soft-capping or position bias")
    queries, keys = query.shape[2], key.shape[2]
    past = keys - queries  # the reused prefix: a whole number of blocks
    if attention_mask is None:  # plain causal
        positions = torch.arange(keys, device=query.device)
        attention_mask = (positions <= positions[past:, None])[None, None]
    elif attention_mask.dtype != torch.bool:  # an additive mask: 0 where attended
        attention_mask = attention_mask == 0
    gqa = {"enable_gqa": True} if query.shape[1] != key.shape[1] else {}
    blocks = [
        torch.nn.functional.scaled_dot_product_attention(
            query[:, :, start : start + PREFILL_ROWS],
            key[:, :, : past + start + PREFILL_ROWS],
            value[:, :, : past + start + PREFILL_ROWS],
            attn_mask=attention_mask[:, :, start : start + PREFILL_ROWS, : past + start + PREFILL_ROWS],
            scale=scaling,
            **gqa,
        )
        for start in range(0, queries, PREFILL_ROWS)
    ]
    return torch.cat(blocks, dim=2).transpose(1, 2).contiguous(), None


AttentionInterface.register(ROWWISE_ATTENTION, _rowwise_sdpa)
AttentionMaskInterface.register(ROWWISE_ATTENTION, sdpa_mask)
AttentionInterface.register(BLOCKED_ATTENTION, _blocked_sdpa)
AttentionMaskInterface.register(BLOCKED_ATTENTION, sdpa_mask)


class PrefixCache:
    """The keys and values of prompts computed earlier, least recently used dropped first, for the
    longest-common-prefix lookup of ``longest_prefix``, in whole blocks of ``block`` tokens."""

    def __init__(self, max_bytes: int = PREFIX_CACHE_BYTES, block: int = PREFILL_ROWS) -> None:
        self.max_bytes, self.block = max_bytes, block
        self._entries: OrderedDict[bytes, tuple[np.ndarray, KV]] = OrderedDict()
        self._bytes = 0
        self.reused_tokens = 0
        self.computed_tokens = 0

    def longest_prefix(self, ids: Sequence[int], limit: int) -> tuple[int, KV | None]:
        """(n, keys and values) of the longest cached prefix of ``ids``, at most ``limit`` tokens,
        rounded down to whole blocks; (0, None) when that is not one block."""
        query = np.asarray(ids[:limit], dtype=np.int64)
        best, best_key = 0, None
        for key, (tokens, _kv) in self._entries.items():
            n = min(len(tokens), len(query))
            if n <= best:
                continue
            differ = np.flatnonzero(tokens[:n] != query[:n])
            common = int(differ[0]) if differ.size else n
            if common > best:
                best, best_key = common, key
        best -= best % self.block
        if best == 0 or best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        kv = self._entries[best_key][1]
        return best, [(k[:, :, :best], v[:, :, :best]) for k, v in kv]

    def add(self, ids: Sequence[int], kv: KV) -> None:
        size = kv_bytes(kv)
        if size > self.max_bytes:
            return
        key = np.asarray(ids, dtype=np.int64).tobytes()
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        self._entries[key] = (np.asarray(ids, dtype=np.int64), kv)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, old) = self._entries.popitem(last=False)
            self._bytes -= kv_bytes(old)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


@functools.cache
def _cache_keyword(forward: Any) -> str:
    """How this transformers release names the cache argument (``cache`` from 5.24; before it,
    ``past_key_values``, which 5.24 still takes with a deprecation warning)."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _run(model: Any, cache: Cache, **inputs: Any) -> Any:
    return model(**inputs, **{_cache_keyword(type(model).forward): cache}, use_cache=True)


def prefill(model: Any, ids: Sequence[int], cache: PrefixCache, keep: int = 1) -> tuple[KV, torch.Tensor]:
    """Run ``ids`` (one prompt) through ``model`` after its longest cached prefix; return its keys and
    values and the logits of its last ``keep`` positions (keep, vocabulary)."""
    if not 1 <= keep <= len(ids):
        raise ValueError(f"keep must be in [1, {len(ids)}], got {keep}")
    # At least two positions are computed: one would be taken for a decoding step (``StepRows``).
    reused, past = cache.longest_prefix(ids, limit=len(ids) - max(keep, 2))
    kv_cache = DynamicCache(ddp_cache_data=past) if past else DynamicCache()
    device = model.get_input_embeddings().weight.device
    out = _run(
        model,
        kv_cache,
        input_ids=torch.tensor([list(ids[reused:])], device=device),
        position_ids=torch.arange(reused, len(ids), device=device)[None],
        logits_to_keep=keep,
    )
    kv = [(layer.keys, layer.values) for layer in kv_cache.layers]
    cache.reused_tokens += reused
    cache.computed_tokens += len(ids) - reused
    cache.add(ids, kv)
    return kv, out.logits[0]


class Workspace:
    """Buffers reused by every decoding batch of a job. Fresh tensors of tens of megabytes cost
    more in page faults than the copies into them (a quarter of a decoding batch's time, measured),
    so the keys and values of a batch live in buffers allocated once and grown when too small."""

    def __init__(self) -> None:
        self._flat: dict[tuple[int, str], torch.Tensor] = {}

    def take(self, layer: int, which: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        numel = int(np.prod(shape))
        flat = self._flat.get((layer, which))
        if flat is None or flat.numel() < numel or flat.dtype != like.dtype or flat.device != like.device:
            flat = torch.empty(numel, dtype=like.dtype, device=like.device)
            self._flat[(layer, which)] = flat
        return flat[:numel].view(shape)

    def clear(self) -> None:
        self._flat.clear()


class _PreallocatedLayer(DynamicLayer):
    """A decoding batch's keys and values for one layer, in buffers with room for every token to
    generate: a step writes its token in place (``DynamicLayer`` concatenates, copying the whole
    cache at every step of every layer), and rows that finished are dropped by moving the rows
    that stay forward (``keep_rows``), not by gathering into new tensors."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        super().__init__()
        self._keys, self._values, self._length = keys, values, length
        self.device, self.is_initialized = keys.device, True
        self._views()

    def _views(self) -> None:
        self.keys, self.values = self._keys[:, :, : self._length], self._values[:, :, : self._length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        n = key_states.shape[-2]
        if self._length + n > self._keys.shape[2]:
            raise RuntimeError("the decoding cache is full: more tokens than it was allocated for")
        self._keys[:, :, self._length : self._length + n] = key_states
        self._values[:, :, self._length : self._length + n] = value_states
        self._length += n
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._length

    def move_row(self, source: int, target: int) -> None:
        """Copy row ``source`` over row ``target`` (a finished row's slot)."""
        self._keys[target].copy_(self._keys[source])
        self._values[target].copy_(self._values[source])

    def truncate_rows(self, rows: int) -> None:
        self._keys, self._values = self._keys[:rows], self._values[:rows]
        self._views()


@dataclass
class _Prefilled:
    row: int  # index in the caller's list
    length: int
    kv: KV
    first: int  # the greedy first token


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """The index of each row's largest logit, the first one on a tie (as ``argmax``).

    ``max(-1).indices`` rather than ``argmax``: the same indices, and on a CPU 4.5x faster in
    bfloat16 (22 against 5 ms for 21 rows of Gemma 3's 262k logits), where ``argmax`` had taken a
    tenth of a decoding step."""
    return logits.max(-1).indices


def decode_groups(lengths: Sequence[int], token_bytes: int, max_bytes: int = DECODE_CACHE_BYTES) -> list[list[int]]:
    """Row indices in decoding batches, longest first: a batch's rows padded to its longest row (plus
    the tokens to generate, counted in ``lengths``) fit ``max_bytes`` of keys and values, and no row
    is padded by more than a third of its length.

    Every step of every row reads the row's keys and values, padding included, and for these small
    models that is more memory than the weights themselves (SmolLM2: 46 KB per token of context, so a
    600-token row reads 27 MB a step against 135 MB of int8 weights shared by all rows): rows of
    similar lengths decode together, at the price of a few more batches."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if (
            groups
            and (len(groups[-1]) + 1) * lengths[groups[-1][0]] * token_bytes <= max_bytes
            and 4 * lengths[i] >= 3 * lengths[groups[-1][0]]
        ):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


@torch.inference_mode()
def greedy_generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos: set[int],
    finished: Callable[[list[int]], bool],
    cache: PrefixCache,
    workspace: Workspace,
    max_bytes: int = DECODE_CACHE_BYTES,
) -> list[list[int]]:
    """Greedy continuations (token ids, an end-of-sequence token included) of ``prompts``.

    A row stops at an end-of-sequence token, when ``finished(its tokens)`` says so (stop strings),
    or after ``max_new_tokens`` tokens; it leaves the decoding batch at once.
    """
    outputs: list[list[int]] = [[] for _ in prompts]
    if not prompts:
        return outputs
    with argmax_only(model):  # only each row's largest logit is read
        # The first prompt's keys and values tell this model's bytes per token.
        kv, logits = prefill(model, prompts[0], cache)
        first = {0: (kv, int(greedy_tokens(logits[-1])))}
        token_bytes = kv_bytes(kv) // max(1, len(prompts[0]))
        for group in decode_groups([len(p) + max_new_tokens for p in prompts], token_bytes, max_bytes):
            rows = []
            for r in group:
                if r in first:
                    kv, token = first.pop(r)
                else:
                    kv, logits = prefill(model, prompts[r], cache)
                    token = int(greedy_tokens(logits[-1]))
                rows.append(_Prefilled(r, len(prompts[r]), kv, token))
            _decode(model, rows, max_new_tokens, eos, finished, outputs, workspace)
    return outputs


def _decode(
    model: Any,
    rows: list[_Prefilled],
    max_new_tokens: int,
    eos: set[int],
    finished: Callable[[list[int]], bool],
    outputs: list[list[int]],
    workspace: Workspace,
) -> None:
    """Decode ``rows`` together from their first tokens, writing each row's tokens into ``outputs``."""
    device = rows[0].kv[0][0].device
    width = max(r.length for r in rows)
    layers = []
    for layer, (k0, v0) in enumerate(rows[0].kv):
        keys = workspace.take(layer, "k", (len(rows), k0.shape[1], width + max_new_tokens, k0.shape[3]), k0)
        values = workspace.take(layer, "v", (len(rows), v0.shape[1], width + max_new_tokens, v0.shape[3]), v0)
        for i, r in enumerate(rows):  # left padding: every row ends at the same position
            k, v = r.kv[layer]
            pad = width - r.length
            keys[i, :, :pad].zero_()  # masked, but must be finite: 0 x -inf is not 0
            values[i, :, :pad].zero_()
            keys[i, :, pad:width] = k[0]
            values[i, :, pad:width] = v[0]
        layers.append(_PreallocatedLayer(keys, values, width))
    kv_cache = Cache(layers=layers)
    mask = torch.zeros((len(rows), width + max_new_tokens), dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        mask[i, width - r.length : width] = 1
    positions = torch.tensor([r.length for r in rows], device=device)
    tokens = torch.tensor([r.first for r in rows], device=device)
    active = [r.row for r in rows]
    for step in range(max_new_tokens):
        for row, token in zip(active, tokens.tolist(), strict=True):
            outputs[row].append(token)
        stopped = [i for i, row in enumerate(active) if outputs[row][-1] in eos or finished(outputs[row])]
        if step == max_new_tokens - 1 or len(stopped) == len(active):
            return
        if stopped:
            # A finished row would still read its keys and values at every step: its slot takes
            # the last row instead (one row's copy, about one step of reading it).
            slot = list(range(len(active)))
            for i in reversed(stopped):
                last = len(slot) - 1
                if i != last:
                    for layer in layers:
                        layer.move_row(last, i)
                    slot[i] = slot[last]
                slot.pop()
            for layer in layers:
                layer.truncate_rows(len(slot))
            index = torch.tensor(slot, device=device)
            mask, positions, tokens = mask[index], positions[index], tokens[index]
            active = [active[i] for i in slot]
        mask[:, width + step] = 1
        logits = _run(
            model,
            kv_cache,
            input_ids=tokens[:, None],
            attention_mask=mask[:, : width + step + 1],
            position_ids=positions[:, None],
            logits_to_keep=1,
        ).logits
        tokens = greedy_tokens(logits[:, -1])
        positions = positions + 1
