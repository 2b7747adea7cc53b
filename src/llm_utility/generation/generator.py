"""What both generation backends share: the ``Generator`` interface (prompt rendering and
tokenization with a Hugging Face tokenizer, the context check), the cut of an answer at its stop
strings, and the removal of thinking blocks."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..gpu import close_before_release
from .specs import normalize_spec

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


def strip_thinking(text: str) -> str:
    """Remove ``<think>...</think>`` blocks (Qwen3), and an unterminated one cut off by max tokens."""
    text = _THINK_BLOCK.sub("", text)
    start = text.find("<think>")
    if start != -1:
        text = text[:start]
    # A template that opens the block in the prompt leaves only the closing tag in the output.
    if "</think>" in text:
        text = text.split("</think>", 1)[1]
    return text.strip()


def cut_answer(text: str, stop: Sequence[str]) -> str:
    """The answer in a raw continuation: leading whitespace dropped, then cut at the earliest stop
    string (excluded), stripped.

    A stop string ends an answer only once the answer has begun: Gemma 3 starts many answers with a
    newline, and cutting at that ``"\\n"`` left nothing (51 of 473 demo outputs were empty).
    """
    text = text.lstrip()
    cut = min((i for s in stop if s and (i := text.find(s)) != -1), default=len(text))
    return text[:cut].strip()


def length_batches(lengths: Sequence[int], max_rows: int) -> list[list[int]]:
    """Row indices in batches for a left-padded backend: longest first, at most ``max_rows`` per
    batch, and a new batch wherever a row is less than half its batch's longest, so no row is padded
    to more than twice its own length.

    Padding is computed like real tokens, and a job's prompts mix lengths: the demo's answer prompts
    with 5 passages are ~500 tokens, with one ~120, with none ~35. Cut only by row count, Gemma's
    32-row batches padded its candidate answers' prompts to 1.8x their tokens; this grouping pads
    them by about 15% for one batch more (one more pass of decoding steps).
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties keep input order
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < max_rows and 2 * lengths[i] >= lengths[batches[-1][0]]:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


class PromptTooLongError(ValueError):
    """A prompt does not fit the model's context; the message names the call and its length."""


class Generator:
    """What both backends share: prompt rendering and tokenization with a Hugging Face tokenizer.

    Subclasses set ``tokenizer`` and implement ``generate`` (and ``close`` when they hold a device).
    Prompts given to ``generate`` and ``count_tokens`` are already rendered strings
    (``render``/``render_chat``), which is also what the generation store keys on.

    A generator created inside ``llm_utility.gpu.lease_gpus`` is closed by the lease before its
    devices are released; ``with load_generator(...) as generator:`` closes it at the block's end.
    """

    backend: str
    tokenizer: Any

    def __init__(self, manifest: Mapping[str, Any], spec: Mapping[str, Any]) -> None:
        self.manifest = dict(manifest)
        self.spec = normalize_spec(spec, manifest.get("slug", "model"))
        self.slug: str = manifest.get("slug", "model")
        self.fingerprint: str = manifest["fingerprint"]
        self.load_path: str = manifest["load_path"]
        self.prompt_format: str = self.spec["prompt_format"]
        self.enable_thinking: bool = bool(self.spec["enable_thinking"])
        self.batch_size: int = int(self.spec["batch_size"])
        self.dtype: str = "float32"  # set by the backend once the device is known
        close_before_release(self)

    def store_key_extras(self) -> dict[str, Any]:
        """What else, besides the fingerprint, backend, prompt and decoding, changes this backend's
        outputs and so belongs in every generation-store key (e.g. the engine's version)."""
        return {}

    def close(self) -> None:
        """Free the model's memory and devices; the tokenizer stays usable. Idempotent."""

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        """Apply the tokenizer's chat template, ready for the assistant's turn."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(
                f"{self.slug}: this model has no chat template (prompt_format: completion); "
                "render plain text with .render() instead"
            )
        # enable_thinking only matters to templates that read it (Qwen3); the others ignore it.
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=self.enable_thinking
        )

    def render(self, text: str) -> str:
        """A chat model gets ``text`` as one user turn; a completion model gets it as it is."""
        if self.prompt_format == "chat":
            return self.render_chat([{"role": "user", "content": text}])
        return text

    def encode(self, prompt: str) -> list[int]:
        """Token ids of a rendered prompt, with the BOS token exactly once.

        Chat templates usually write the BOS token into the text (Llama 3, Gemma; SmolLM2's BOS is
        its `<|im_start|>`); adding it again would change every output. Completion prompts get the
        tokenizer's usual special tokens (Gemma's base model needs its `<bos>`).
        """
        bos = getattr(self.tokenizer, "bos_token", None)
        add = not (bos and prompt.startswith(bos))
        return self.tokenizer(prompt, add_special_tokens=add)["input_ids"]

    def count_tokens(self, texts: Sequence[str], special: bool = True) -> list[int]:
        """Number of tokens of each rendered prompt as the model sees it (``special``: with the BOS
        rule of ``encode``), or of plain text such as an output (``special=False``)."""
        if special:
            return [len(self.encode(p)) for p in texts]
        return [len(self.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]

    @functools.cached_property
    def context_length(self) -> int | None:
        """The longest sequence (prompt + generated tokens) the model takes: ``max_model_len`` when
        configured, else the model config's ``max_position_embeddings``, else the tokenizer's limit."""
        if self.spec["max_model_len"]:
            return int(self.spec["max_model_len"])
        config = Path(self.load_path) / "config.json"
        if config.is_file():
            cfg = json.loads(config.read_text(encoding="utf-8"))
            limit = cfg.get("max_position_embeddings") or (cfg.get("text_config") or {}).get("max_position_embeddings")
            if limit:
                return int(limit)
        limit = getattr(self.tokenizer, "model_max_length", None)
        return int(limit) if limit and limit < 10_000_000 else None  # transformers' "no limit" is 1e30

    def check_fits(self, prompts: Sequence[str], labels: Sequence[str], reserve: int) -> None:
        """Raise ``PromptTooLongError`` before any model call when a prompt plus ``reserve`` tokens
        (the tokens to generate or score) exceeds ``context_length``; ``labels`` name each prompt's
        call (dataset, query, context) for the message."""
        limit = self.context_length
        if limit is None:
            return
        for prompt, label, n in zip(prompts, labels, self.count_tokens(prompts), strict=True):
            if n + reserve > limit:
                raise PromptTooLongError(
                    f"{self.slug}: the prompt of {label} has {n} tokens, and with {reserve} more to "
                    f"generate it exceeds the model's context of {limit} tokens. Set "
                    f"`max_passage_tokens` (per-passage truncation) or a smaller `top_k`, or raise "
                    f"llms.{self.slug}.max_model_len if the model takes more."
                )

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        """Log-probability of each token of ``target`` after the rendered ``prompt``, per pair."""
        raise NotImplementedError(f"backend {self.backend!r} cannot score targets")

    def attention(self, requests: Sequence[Any], pooling: str = "mean") -> list[list[float]]:
        """Per-passage attention mass of each request's answer tokens (see the transformers backend)."""
        raise NotImplementedError(
            f"backend {self.backend!r} does not expose attention weights; attention scoring runs on the "
            "transformers backend (rankings.attention_backend)"
        )

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = ()) -> list[str]:
        """Greedy continuations of rendered ``prompts``, each cut by ``cut_answer``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.slug!r}, {self.load_path!r}, {self.dtype})"
