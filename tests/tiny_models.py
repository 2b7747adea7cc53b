"""Tiny random LLMs built at test time, for runs that check wiring rather than model numbers: a chat
Llama (SmolLM2's kind: a chat template that writes the BOS token itself) and a completion Gemma 3
(Gemma 3 270M's kind: the tokenizer adds BOS, and alternating sliding-window and full attention, with a
window shorter than the prompts).

Each is a model folder with a byte-level BPE tokenizer trained in milliseconds, loadable by
``AutoModelForCausalLM`` and the workflow's ``weights: {path: ...}``."""

from __future__ import annotations

from pathlib import Path

import torch

TEXT = (
    "Information: Lima is the capital of Peru. Question: What is the capital of Peru? Answer: "
    "Santiago Chile Oslo Norway lies on the coast of the Pacific ocean, and is home to ten million "
    "people. The official language of the country is Spanish; its currency is the sol (PEN). "
    "SUPPORTS REFUTES Yes No true false [1] [2] [3] [4] [5] > , . ? : ; ( ) - 0123456789 "
    "passage passages utility select selection rank ranking identifier My "
    # The judgment formats (config/prompts.yaml), so their caps fit as they do for real tokenizers.
    + "Utility judgment: Yes. Utility judgment: No. My selection:[[1],[2]] [1]>[2]>[3] "
    * 3
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)


def _tokenizer(path: Path, chat: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<pad>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([TEXT], trainer)
    if not chat:  # a base model's tokenizer adds its BOS (Gemma's <bos>)
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    return tok


def write_tiny_model(path: Path, arch: str, seed: int = 0, hidden_size: int = 32, layers: int = 2) -> Path:
    """A random ``arch`` ("llama": chat; "gemma3": completion) of ``layers`` layers saved in ``path``.
    A wider one (``hidden_size``) is slower: a call lasts long enough to act on it mid-way."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(path, chat=arch == "llama")
    ids = {name: tok.token_to_id(name) for name in ("<pad>", "<s>", "</s>")}
    common = dict(
        vocab_size=tok.get_vocab_size(),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=ids["<s>"],
        eos_token_id=ids["</s>"],
        pad_token_id=ids["<pad>"],
    )
    torch.manual_seed(seed)
    # Initializer ranges at which greedy outputs vary with the prompt (at the default 0.02, or 1.0
    # for Gemma, every prompt gets the same repeated token), so the run's gold sets, parses and
    # transfers are not all empty.
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True, initializer_range=0.5))
    elif arch == "gemma3":
        config = Gemma3TextConfig(
            **common,
            head_dim=8,
            query_pre_attn_scalar=8,
            sliding_window=64,
            layer_types=["sliding_attention", "full_attention"] * (layers // 2) + ["sliding_attention"] * (layers % 2),
            initializer_range=0.2,
        )
        model = Gemma3ForCausalLM(config)
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}")
    model.save_pretrained(path)
    return path
