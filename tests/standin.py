"""A stand-in model for the fast test tier: a real Hugging Face tokenizer (a byte-level BPE trained
in milliseconds on a few sentences, with a chat template) behind the project's ``Generator``
interface, and deterministic rules instead of weights. Jobs run end to end through the store, the
prompts and the parsers, without loading or dequantizing any model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_utility.generation.generator import Generator, cut_answer

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "Information: Lima is the capital of Peru. Question: What is the capital of Peru? Answer:",
    "Verify the claim SUPPORTS REFUTES yes no passage passages utility [1] [2] [3] > none",
    "The quick brown fox jumps over the lazy dog 0123456789 ,.;:!?()[]{}<>'\"-_/",
]


def write_tiny_model(path: Path, context_length: int = 2048) -> Path:
    """A model directory with a trained tokenizer and a config.json (no weights)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(path)
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": context_length}))
    return path


class StandInGenerator(Generator):
    """Answers by rule: the first capitalized word after "is the capital of" in the prompt's passages
    (else "Unknown"); a claim prompt gets "SUPPORTS"; a pointwise judgment "Yes" when the passage
    names a capital, a listwise one the ids of the passages that do; a ranking lists them first;
    each judgment in the output format its prompt asks for (config/prompts.yaml). Log-probabilities
    favour targets that occur in the prompt; attention follows passage length."""

    backend = "stand-in"

    def __init__(self, manifest: dict[str, Any], spec: dict[str, Any]) -> None:
        from transformers import AutoTokenizer

        super().__init__(manifest, spec)
        self.tokenizer = AutoTokenizer.from_pretrained(self.load_path)
        self.calls: list[str] = []

    @property
    def loaded(self) -> bool:
        return True

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = ()) -> list[str]:
        self.calls += ["generate"] * len(prompts)
        return [cut_answer(self._answer(p), stop) for p in prompts]

    def _answer(self, prompt: str) -> str:
        ids = re.findall(r"\[(\d+)\] [^\n]*is the capital of", prompt)
        if "descending order of utility" in prompt:
            return ">".join(f"[{i}]" for i in ids) or "I cannot rank these."
        if "My selection:" in prompt:
            return "My selection:[" + ",".join(f"[{i}]" for i in ids) + "]."
        if "Utility judgment: Yes/No" in prompt:
            verdict = "Yes" if re.search(r"Passage: [^\n]*is the capital of", prompt) else "No"
            return f"Utility judgment: {verdict}."
        if "claim" in prompt.lower():
            return "SUPPORTS"
        found = re.search(r"([A-Z][a-z]+) is the capital of", prompt)
        return f"\n{found.group(1)}\nmore text" if found else "Unknown"

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        self.calls += ["score"] * len(pairs)
        out = []
        for prompt, target in pairs:
            n = len(self.tokenizer(target, add_special_tokens=False)["input_ids"])
            value = -0.1 if target.strip() and target.strip() in prompt else -2.0
            out.append([value] * n)
        return out

    def attention(self, requests: Sequence[Any], pooling: str = "mean") -> list[list[float]]:
        self.calls += ["attention"] * len(requests)
        out = []
        for r in requests:
            sizes = [float(b - a) for a, b in r.spans]
            total = sum(sizes) or 1.0
            out.append([s / total for s in sizes])
        return out


def stand_in_manifest(model_dir: Path, slug: str = "stand-in") -> dict[str, Any]:
    return {"slug": slug, "backend": "stand-in", "load_path": str(model_dir), "fingerprint": f"stand-in:{slug}"}
