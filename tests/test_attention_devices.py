"""The attention pass (Eq. 6) on a model whose layers sit on two devices, without a GPU.

A tiny random Llama (three layers, grouped-query attention) is split as ``device_map="auto"``
splits a large model over two GPUs: the embedding and the first layer on one device, the other
layers, the final norm and the LM head on a second one. The second device is simulated
(``split_devices.TwoDevices``: CPU values, device labels checked as CUDA checks devices), so this
proves that the hook code meets every layer's weights with tensors of that layer's own device,
that the result is gathered on the CPU, and that it equals the one-device computation and a direct
``output_attentions`` computation. What only a GPU shows (CUDA kernels in bf16, accelerate's real
dispatch, memory) is checked by ``benchmarks/gpu_check.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from llm_utility.generation import AttentionRequest, load_generator
from split_devices import TwoDevices, label, place_on
from standin import write_tiny_model

# A tiny model built and split per test module (about 40 s on 2 cores): the slow tier.
pytestmark = pytest.mark.slow

SPEC = {"backend": "transformers", "weights": {"path": "unused"}, "prompt_format": "chat", "max_new_tokens": 8}


def write_tiny_lm(path: Path, layers: int = 3) -> Path:
    """A random Llama with the stand-in's trained tokenizer; a large init spread makes attention peaked."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    write_tiny_model(path)
    tok = AutoTokenizer.from_pretrained(path)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        initializer_range=0.4,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_lm(tmp_path_factory.mktemp("tiny-lm"))
    return {"slug": "tiny", "backend": "transformers", "load_path": str(path), "fingerprint": "tiny"}


def _request(gen) -> AttentionRequest:
    prompt = gen.render(
        "Information:\n[1] Oslo is the capital of Norway.\n[2] Lima is the capital of Peru.\n"
        "[3] The quick brown fox.\nQuestion: What is the capital of Peru?"
    )
    spans = []
    for text in ("Oslo is the capital of Norway.", "Lima is the capital of Peru.", "The quick brown fox."):
        start = prompt.index(text)
        spans.append((start, start + len(text)))
    return AttentionRequest(prompt, tuple(spans), "Lima is the capital")


def _split_over_two_devices(model) -> None:
    """What device_map="auto" does with two GPUs: the first half of the blocks on one, the rest on the other."""
    inner = model.model
    for module in (inner.embed_tokens, inner.layers[0], inner.rotary_emb):
        place_on(module, "cuda:0")
    for module in (*inner.layers[1:], inner.norm, model.lm_head):
        place_on(module, "cuda:1")


def test_the_second_device_catches_what_a_gpu_would():
    with TwoDevices():
        on_gpu = label(torch.ones(2, 3), "cuda:1")
        with pytest.raises(RuntimeError, match="same device.*cpu, cuda:1"):
            on_gpu @ torch.ones(3, 2)
        with pytest.raises(RuntimeError, match="same device.*cuda:0, cuda:1"):
            on_gpu @ torch.ones(3, 2, device="cuda:0")
        assert (on_gpu @ torch.ones(3, 2).to(on_gpu.device)).device == torch.device("cuda:1")
        assert (on_gpu * torch.tensor(2.0)).device == torch.device("cuda:1")  # a 0-dim CPU scalar may meet it
        assert on_gpu.sum().cpu().device == torch.device("cpu")


def test_attention_on_a_model_split_over_two_devices_equals_one_device(tiny):
    gen = load_generator(tiny, SPEC)
    request = _request(gen)
    [one_device] = gen.attention([request])

    split = load_generator(tiny, SPEC)
    _split_over_two_devices(split.model)
    layers_seen: list[torch.device] = []
    for layer in split.model.model.layers:
        layer.self_attn.register_forward_hook(lambda _m, _a, out: layers_seen.append(out[1].device))
    with TwoDevices():
        [two_devices] = split.attention([request])

    # The hook really met weights on both devices, and the split model computes what the whole one does.
    assert layers_seen == [torch.device("cuda:0"), torch.device("cuda:1"), torch.device("cuda:1")]
    assert two_devices == pytest.approx(one_device, abs=1e-6)
    assert all(isinstance(x, float) for x in two_devices) and sum(two_devices) == pytest.approx(1.0)


def test_attention_equals_a_direct_output_attentions_computation(tiny):
    """Eq. 6 written out: per decoding step the attention of the generating row on each passage's
    tokens, mean over heads and layers, averaged over steps, normalized across passages."""
    from transformers import AutoModelForCausalLM

    gen = load_generator(tiny, SPEC)
    request = _request(gen)
    [got] = gen.attention([request])

    eager = AutoModelForCausalLM.from_pretrained(tiny["load_path"], attn_implementation="eager", dtype=torch.float32)
    ids = gen.encode(request.prompt)
    answer = gen.tokenizer(request.answer, add_special_tokens=False)["input_ids"]
    offsets = gen.tokenizer(request.prompt, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    tokens = [
        [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start] for start, end in request.spans
    ]
    with torch.inference_mode():
        attentions = eager(torch.tensor([ids + answer[:-1]]), output_attentions=True).attentions
    steps = range(len(ids) - 1, len(ids) + len(answer) - 1)
    raw = [
        sum(float(torch.stack([a[0, :, t, toks].sum(-1).mean() for a in attentions]).mean()) for t in steps)
        / len(steps)
        for toks in tokens
    ]
    expected = [r / sum(raw) for r in raw]
    assert got == pytest.approx(expected, abs=1e-5)
    assert max(expected) - min(expected) > 0.05  # the random model's attention is not uniform: a real check
