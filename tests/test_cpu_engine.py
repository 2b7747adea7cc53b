"""The transformers backend's CPU engine (``generation.hf_engine``) and its int8 arithmetic
(``generation.cpu_arithmetic``), checked against transformers itself: ``model.generate`` and
direct unbatched forward passes, on tiny random Llamas built here (fast tier) and on both demo
models (slow tier).

What must hold, and why:
- in float32 the engine decodes what ``model.generate`` decodes, prompt by prompt;
- a call's output does not depend on the other calls of its batch (the generation store keys a call
  without its batch): one prompt alone and inside a batch of other lengths give the same output;
- a prefix reused from an earlier prompt gives what computing it again gives: bitwise in int8, where
  the engine reuses prefixes, within rounding in float32;
- int8 rows are quantized one by one, so an int8 linear layer's row is bitwise the same alone or in
  any batch.
"""

from __future__ import annotations

import copy
import math
import platform

import pytest
import torch

from llm_utility.generation import cpu_arithmetic, hf_engine, load_generator
from llm_utility.generation.cpu_arithmetic import (
    Int8RowLinear,
    VocabularySlices,
    outlier_channels,
    quantize_linears,
    resolve_dtype,
)
from llm_utility.generation.generator import cut_answer
from test_independent_checks import _tiny, direct_target_logprobs, tiny_spec, write_tiny_llama
from tiny_models import write_tiny_model

PROMPTS = [
    "Information: Lima is the capital of Peru. Question: What is the capital of Peru? Answer:",
    "Question: What is the capital of Chile? Answer:",
    "Information: Oslo lies on the coast of Norway. Lima is the capital of Peru. Lima lies on the coast "
    "of the Pacific ocean, and is home to ten million people. Question: What is the capital of Peru? Answer:",
    "Peru?",
    "Information: Lima is the capital of Peru. Question: What is the capital of Chile? Answer:",
    "Santiago",
]

int8_only = pytest.mark.skipif(not cpu_arithmetic.int8_supported(), reason="int8 needs an x86 CPU with AVX2 (fbgemm)")


def direct_greedy(gen, prompt: str, max_new_tokens: int, stop: list[str]) -> str:
    """transformers' own greedy ``generate`` on one unpadded prompt, cut by the stop rule."""
    ids = torch.tensor([gen.encode(prompt)])
    config = copy.deepcopy(gen._gen_config)
    config.max_new_tokens = max_new_tokens
    with torch.inference_mode():
        out = gen.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
    return cut_answer(gen.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True), stop)


@pytest.fixture(scope="module")
def tiny_fp32(tmp_path_factory):
    return _tiny("bos", tmp_path_factory)


@pytest.fixture(scope="module")
def tiny_int8(tmp_path_factory):
    if not cpu_arithmetic.int8_supported():
        pytest.skip("int8 needs an x86 CPU with AVX2 (fbgemm)")
    path = tmp_path_factory.mktemp("tiny-int8")
    return load_generator(write_tiny_llama(path, "no_bos", seed=3), {**tiny_spec(path), "dtype": "int8"})


# --- the arithmetic ---------------------------------------------------------------------------------


def kernels_uncapped(monkeypatch):
    """As on a CPU whose kernels may use all it has: ATen's AVX-512 ones, oneDNN's bfloat16."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(cpu_arithmetic, "bfloat16_packing_supported", lambda: True)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)


def test_dtype_auto_is_the_fastest_arithmetic_that_meets_the_fidelity_floor(monkeypatch):
    """bfloat16 where the CPU multiplies it natively, float32 elsewhere; never int8, which is below the
    floor (docs/performance.md, "The fidelity floor"), though faster on AVX2 and AVX-512 without AMX."""
    flags = {"amx_bf16": False, "avx512_bf16": False, "avx512_f": False, "avx2": True}  # torch's names
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: flags)
    monkeypatch.setattr(cpu_arithmetic, "has_fbgemm", lambda: True)
    kernels_uncapped(monkeypatch)
    assert resolve_dtype("auto", cuda=False) == "float32"  # AVX2 only: bfloat16 would be emulated
    assert resolve_dtype("int8", cuda=False) == "int8"  # asked for: fbgemm's int8
    assert resolve_dtype(None, cuda=False) == "float32" and resolve_dtype("float32", cuda=False) == "float32"
    assert resolve_dtype("auto", cuda=True) == "bfloat16" and resolve_dtype(None, cuda=True) == "bfloat16"
    flags.update(avx512_f=True)
    assert resolve_dtype("auto", cuda=False) == "float32"  # AVX-512 with VNNI, no BF16
    flags["avx512_bf16"] = True
    assert resolve_dtype("auto", cuda=False) == "bfloat16"  # AVX-512 BF16 (a Zen 4 or 5 EPYC)
    flags.update(avx512_bf16=False, amx_bf16=True)
    assert resolve_dtype("auto", cuda=False) == "bfloat16"  # AMX: bfloat16 tiles
    flags.update(amx_bf16=False, avx2=False, avx512_f=False)
    assert resolve_dtype("auto", cuda=False) == "float32"  # no x86 vector kernels (e.g. an ARM CPU)
    with pytest.raises(ValueError, match="needs an x86 CPU"):
        resolve_dtype("int8", cuda=False)
    with pytest.raises(ValueError, match="CPU arithmetic"):
        resolve_dtype("int8", cuda=True)
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("int4", cuda=False)
    monkeypatch.delattr(torch.cpu, "get_capabilities")  # an older torch reports no flags: float32
    assert resolve_dtype("auto", cuda=False) == "float32"


def test_cpu_flags_read_the_names_torch_reports(monkeypatch):
    """torch.cpu.get_capabilities spells two flags as cpuinfo does (avx512_f, fma3): an AVX-512 CPU
    is one, whatever its AVX2 says (the flags were read as avx512f and fma, never set, before)."""
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"avx512_f": True, "fma3": True, "avx2": False})
    monkeypatch.setattr(cpu_arithmetic, "has_fbgemm", lambda: True)
    kernels_uncapped(monkeypatch)
    flags = cpu_arithmetic.cpu_flags()
    assert flags["avx512f"] and flags["fma"] and not flags["avx2"]
    assert cpu_arithmetic.int8_supported()  # fbgemm's AVX-512 kernels
    monkeypatch.undo()
    if platform.machine() in ("x86_64", "AMD64"):  # torch still names every flag we read so
        assert set(cpu_arithmetic.TORCH_FLAG_NAMES.values()) <= set(torch.cpu.get_capabilities())


def test_dtype_auto_follows_the_kernels_torch_was_capped_at(monkeypatch):
    """``ATEN_CPU_CAPABILITY=avx2`` and ``ONEDNN_MAX_CPU_ISA`` cap the kernels torch runs below what
    the CPU has: ``auto`` then picks what those kernels run fastest (an AVX-512 or AMX machine
    emulating an AVX2-only one, ``benchmarks/cpu_engine.py --emulate``)."""
    amx = {"amx_bf16": True, "amx_int8": True, "avx512_bf16": True, "avx512_vnni": True, "avx512f": True, "avx2": True}
    as_torch_names = {cpu_arithmetic.TORCH_FLAG_NAMES[name]: on for name, on in amx.items()}
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: as_torch_names)
    monkeypatch.setattr(cpu_arithmetic, "has_fbgemm", lambda: True)
    kernels_uncapped(monkeypatch)
    assert resolve_dtype("auto", cuda=False) == "bfloat16"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")  # AVX-512 BF16 without AMX
    assert cpu_arithmetic.cpu_flags()["avx512_bf16"] and not cpu_arithmetic.cpu_flags()["amx_bf16"]
    assert resolve_dtype("auto", cuda=False) == "bfloat16"
    monkeypatch.setattr(cpu_arithmetic, "bfloat16_packing_supported", lambda: False)  # oneDNN: no bfloat16
    assert resolve_dtype("auto", cuda=False) == "float32"
    kernels_uncapped(monkeypatch)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # ATEN_CPU_CAPABILITY=avx2
    flags = cpu_arithmetic.cpu_flags()
    assert flags["avx2"] and not any(flags[name] for name in amx if name != "avx2")
    assert resolve_dtype("auto", cuda=False) == "float32"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")  # no vector kernels
    assert resolve_dtype("auto", cuda=False) == "float32"


@int8_only
def test_an_int8_row_is_the_same_alone_and_in_any_batch():
    """The integer product is exact, so bitwise the same; the float32 product of the outlier channels
    goes through a GEMM whose kernel depends on the row count (1 ulp apart)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    rows = torch.randn(9, 64) * torch.logspace(-3, 3, 9)[:, None]  # magnitudes a million apart
    rows[4, 17] = 500.0  # an outlier channel far beyond the row's other values
    others = torch.randn(5, 64) * 1e4
    for outliers in (None, torch.tensor([3, 17])):
        layer = Int8RowLinear(linear, outliers)
        together = layer(rows)
        for i in range(len(rows)):
            alone = layer(rows[i : i + 1])
            beside_others = layer(torch.cat([rows[i : i + 1], others]))[:1]
            for got in (together[i : i + 1], beside_others):
                if outliers is None:
                    assert torch.equal(alone, got)
                else:
                    assert torch.allclose(alone, got, rtol=1e-6, atol=1e-6 * float(alone.abs().max()))


@int8_only
def test_an_int8_linear_is_within_its_quantization_error_of_float32():
    torch.manual_seed(1)
    linear = torch.nn.Linear(128, 32, bias=True)
    x = torch.randn(20, 128)
    x[:, 5] *= 40.0  # one outlier channel, as LLM activations have
    exact = linear(x)
    for outliers, bound in ((None, 0.25), (torch.tensor([5]), 0.03)):
        got = Int8RowLinear(linear, outliers)(x)
        # Activations keep 7 bits of their row's range: the error is a few percent of the output's
        # scale, and much less once the outlier channel is left out of that range.
        error = ((got - exact).norm(dim=1) / exact.norm(dim=1)).max()
        assert error < bound, (outliers, float(error))
    # The outlier channel's own contribution is float32: an input only there is exact.
    only = torch.zeros(1, 128)
    only[0, 5] = 3.0
    got = Int8RowLinear(linear, torch.tensor([5]))(only)
    assert torch.allclose(got, linear(only), atol=1e-5)


@int8_only
def test_an_int8_linear_is_its_integer_product_written_out():
    """The layer against its recipe computed here in int64: each row, outlier channels zeroed,
    divided by its largest magnitude m, coded round(x / (2/127)) + 64; the weights per output channel
    w = round(W / s) with s = max|W_v| / 127; the output m * (2/127) * s * sum (code - 64) w, plus
    the outlier channels in float64."""
    torch.manual_seed(4)
    linear = torch.nn.Linear(96, 40)
    x = torch.randn(7, 96) * torch.logspace(-2, 2, 7)[:, None]
    x[:, 11] *= 50.0
    x[2, 0], x[3, 1] = 1e3, -1e3  # a row whose peak is +m, one whose peak is -m: codes 128 and 0
    outliers = torch.tensor([11, 60])
    got = Int8RowLinear(linear, outliers)(x).double()

    inliers = torch.ones(96, dtype=torch.bool)
    inliers[outliers] = False
    w = linear.weight.detach().double()
    w_in = torch.where(inliers, w, 0.0)
    scales = w_in.float().abs().amax(dim=1).double() / 127
    w_int = torch.round(w_in.float().double() / scales[:, None]).clamp(-127, 127).to(torch.int64)
    x_in = torch.where(inliers, x, 0.0)
    m = x_in.abs().amax(dim=1, keepdim=True)
    codes = (torch.round((x_in / m).double() / (2 / 127)) + 64).clamp(0, 255).to(torch.int64)
    assert int(codes.max()) == 128 and int(codes.min()) == 0
    sums = (codes - 64) @ w_int.t()  # exact
    expected = sums.double() * (2 / 127) * scales[None, :] * m.double()
    expected += x[:, outliers].double() @ w[:, outliers].t() + linear.bias.detach().double()
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max()))


@pytest.mark.slow  # loads a model twice
@int8_only
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_layers_reading_one_input_share_one_int8_product_bitwise(arch, tmp_path, monkeypatch):
    """q, k and v (and gate and up) multiplied as one int8 product give bitwise each layer's own
    output: logits of a prompt's every position, and the tokens the engine decodes."""
    from transformers import AutoModelForCausalLM

    path = write_tiny_model(tmp_path / arch, arch)
    ids = list(range(3, 40))
    groups = cpu_arithmetic.SHARED_INPUT_LAYERS

    def run(shared):
        monkeypatch.setattr(cpu_arithmetic, "SHARED_INPUT_LAYERS", groups if shared else ())
        model = AutoModelForCausalLM.from_pretrained(path).eval()
        quantize_linears(model, ids[:20])
        n_shared = sum(isinstance(m, cpu_arithmetic.SharedInputLinears) for m in model.modules())
        cpu_arithmetic.fix_step_rows(model)
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([ids])).logits
        tokens = hf_engine.greedy_generate(
            model, [ids, ids[:9]], 6, set(), lambda t: False, hf_engine.PrefixCache(0), hf_engine.Workspace()
        )
        return n_shared, logits, tokens

    n_alone, logits_alone, tokens_alone = run(False)
    n_shared, logits_shared, tokens_shared = run(True)
    assert n_alone == 0 and n_shared == 2 * AutoModelForCausalLM.from_pretrained(path).config.num_hidden_layers
    assert torch.equal(logits_shared, logits_alone)
    assert tokens_shared == tokens_alone


@pytest.mark.slow  # loads a model
@int8_only
def test_outlier_channels_are_the_largest_inputs_of_each_layer(tiny_fp32):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_fp32.load_path).eval()  # as loaded, before the engine wraps it
    ids = tiny_fp32.encode("Lima is the capital of Peru.")
    seen = {}
    hooks = [
        m.register_forward_hook(lambda mod, inp, out, name=name: seen.__setitem__(name, inp[0][0].abs().amax(0)))
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear)
    ]
    with torch.inference_mode():
        model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    chosen = outlier_channels(model, ids, k=4)
    assert set(chosen) == set(seen) - {"lm_head"} and chosen
    for name, channels in chosen.items():
        assert set(channels.tolist()) == set(seen[name].topk(4).indices.tolist())


@pytest.mark.slow  # loads a model
@int8_only
def test_quantize_linears_replaces_every_linear_but_the_output_layer(tmp_path):
    from transformers import AutoModelForCausalLM

    manifest = write_tiny_llama(tmp_path / "m", "bos")
    model = AutoModelForCausalLM.from_pretrained(manifest["load_path"]).eval()
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    embeddings = model.get_input_embeddings().weight.clone()
    head = model.get_output_embeddings()
    assert quantize_linears(model, [1, 5, 9, 12], k=4) == n_linear - 1
    assert [m for m in model.modules() if isinstance(m, torch.nn.Linear)] == [head]
    assert model.get_output_embeddings() is head and head.weight.dtype == torch.float32
    assert torch.equal(model.get_input_embeddings().weight, embeddings)
    assert cpu_arithmetic.output_vocabulary(model) == model.config.vocab_size


# --- the engine -------------------------------------------------------------------------------------


@pytest.mark.slow  # loads a model
def test_the_engine_decodes_what_transformers_generate_decodes(tiny_fp32):
    gen = tiny_fp32
    assert gen.dtype == "float32"
    for stop in ([], ["e"], [" "]):  # " " stops after the answer began (leading whitespace does not)
        got = gen.generate(PROMPTS, max_new_tokens=12, stop=stop)
        assert got == [direct_greedy(gen, p, 12, stop) for p in PROMPTS], stop


@pytest.mark.slow  # loads a model twice
def test_the_engine_in_float32_decodes_what_a_plain_transformers_model_decodes(tmp_path, monkeypatch):
    """The engine's own layers checked against none of them: the same weights loaded by transformers
    alone (no ``StepRows``, no ``VocabularySlices``, its own attention) decode the same greedy tokens
    prompt by prompt, and score the same targets within float32 rounding, while the engine decodes
    40 prompts together (steps of up to 40 rows: three blocks) with its output layer in 5 slices."""
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(cpu_arithmetic, "SLICE_BYTES", 64 * 32 * 4)  # 64 of the 300 vocabulary rows
    path = tmp_path / "tiny"
    manifest = write_tiny_llama(path, "bos", seed=7)
    gen = load_generator(manifest, {**tiny_spec(path), "dtype": "float32"})
    assert len(gen.model.get_output_embeddings().linear._bounds) == 5
    plain = AutoModelForCausalLM.from_pretrained(manifest["load_path"], dtype=torch.float32).eval()
    assert not any(isinstance(m, cpu_arithmetic.StepRows | VocabularySlices) for m in plain.modules())
    prompts = [PROMPTS[i % len(PROMPTS)] + " Peru" * (i // len(PROMPTS)) for i in range(40)]
    got = gen.generate(prompts, max_new_tokens=10)
    config = copy.deepcopy(gen._gen_config)
    config.max_new_tokens = 10
    for prompt, text in zip(prompts, got):
        ids = torch.tensor([gen.encode(prompt)])
        with torch.inference_mode():
            out = plain.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
        assert text == cut_answer(gen.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True), [])
    target = " Lima is the capital of Peru"
    for prompt, scores in zip(prompts[:6], gen.score([(p, target) for p in prompts[:6]])):
        tid = gen.tokenizer(target, add_special_tokens=False)["input_ids"]
        assert scores == pytest.approx(direct_target_logprobs(plain, gen.encode(prompt), tid), abs=1e-4)


@pytest.mark.slow  # loads a model
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_the_engine_decodes_what_generate_decodes_for_each_architecture(arch, tmp_path):
    """A chat Llama and a completion Gemma 3 whose sliding window (64 tokens) is shorter than most of
    the prompts: the engine's own cache must give what transformers' hybrid cache gives."""
    path = write_tiny_model(tmp_path / arch, arch)
    manifest = {"slug": arch, "backend": "transformers", "load_path": str(path), "fingerprint": arch}
    spec = {
        "backend": "transformers",
        "weights": {"path": str(path)},
        "dtype": "float32",
        "prompt_format": "chat" if arch == "llama" else "completion",
    }
    gen = load_generator(manifest, spec)
    prompts = [
        gen.render("Information: Lima is the capital of Peru. " * k + "Question: What is it?") for k in (1, 3, 6, 12)
    ]
    lengths = [len(gen.encode(p)) for p in prompts]
    assert min(lengths) < 64 < max(lengths)
    assert gen.generate(prompts, max_new_tokens=12) == [direct_greedy(gen, p, 12, []) for p in prompts]


def _tiny_in(dtype: str, factory: pytest.TempPathFactory):
    if dtype == "int8" and not cpu_arithmetic.int8_supported():
        pytest.skip("int8 needs an x86 CPU with AVX2 (fbgemm)")
    path = factory.mktemp(f"tiny-{dtype}")
    return load_generator(write_tiny_llama(path, "bos", seed=5), {**tiny_spec(path), "dtype": dtype})


@pytest.mark.slow  # loads a model
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_a_call_is_bitwise_the_same_alone_and_in_a_batch_of_other_lengths(dtype, tmp_path_factory):
    """The generation store keys a call without its batch: alone, or among 40 prompts of other
    lengths (decoding steps of up to 40 rows, so several blocks of ``STEP_ROWS``), a prompt gets the
    same tokens and bitwise the same scores, in every arithmetic."""
    gen = _tiny_in(dtype, tmp_path_factory)
    assert gen.dtype == dtype and gen.store_key_extras()["cpu_engine"] == hf_engine.CPU_ENGINE
    prompts = [PROMPTS[i % len(PROMPTS)] + " Peru" * (i // len(PROMPTS)) for i in range(40)]
    together = gen.generate(prompts, max_new_tokens=10)
    assert len(set(together)) > 5  # the rows really differ
    assert [gen.generate([p], max_new_tokens=10)[0] for p in prompts[::3]] == together[::3]
    pairs = [(p, " Lima is the capital of Peru") for p in prompts[:12]]
    scores = gen.score(pairs)
    assert [gen.score([pair])[0] for pair in pairs] == scores


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_decoding_step_row_is_bitwise_the_same_alone_and_in_any_block(dtype):
    """``StepRows`` multiplies a step's rows in blocks of exactly STEP_ROWS, whatever their number;
    a prompt's tokens (one row of several) are one product, as ``nn.Linear`` makes it."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 200).to(dtype)
    layer = cpu_arithmetic.StepRows(linear)
    rows = torch.randn(70, 1, 96, dtype=dtype)
    together = layer(rows)
    assert together.shape == (70, 1, 200)
    for n in (1, 5, 16, 17, 50):
        assert torch.equal(layer(rows[:n]), together[:n]), n
    for i in (0, 3, 69):
        assert torch.equal(layer(rows[i : i + 1]), together[i : i + 1])
        assert torch.equal(
            layer(torch.cat([rows[i : i + 1], torch.randn(30, 1, 96, dtype=dtype)]))[:1], together[i : i + 1]
        )
    prompt = torch.randn(1, 33, 96, dtype=dtype)
    assert torch.equal(layer(prompt), linear(prompt))


@int8_only
def test_an_int8_decoding_step_is_one_product_and_each_row_bitwise_its_own():
    """An int8 layer's step is one integer product of every row (exact, each row quantized alone);
    its float32 outlier channels still multiply in blocks of exactly STEP_ROWS rows: a row is bitwise
    the same alone, among fewer rows or among more, and the same as that layer in blocks of 16 (the
    int8 product of 1 row is bitwise its product among 15 zero rows)."""
    torch.manual_seed(2)
    linear = torch.nn.Linear(96, 200)
    int8 = Int8RowLinear(linear, torch.tensor([4, 50, 77]))
    layer = cpu_arithmetic.StepRows(int8)
    rows = torch.randn(70, 1, 96) * torch.logspace(-2, 2, 70)[:, None, None]
    rows[:, :, 50] *= 40.0
    together = layer(rows)
    blocks = torch.cat([int8(b) for b in torch.cat([rows[:, 0], rows.new_zeros(10, 96)]).split(16)])[:70]
    assert torch.equal(together[:, 0], blocks)
    for n in (1, 5, 16, 17, 50):
        assert torch.equal(layer(rows[:n]), together[:n]), n
    for i in (0, 3, 69):
        assert torch.equal(layer(torch.cat([rows[i : i + 1], torch.randn(30, 1, 96) * 1e3]))[:1], together[i : i + 1])
    calls = []
    int8.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    layer(rows)
    assert calls == [70]  # one product of the step's own rows: no padding rows multiplied in int8


def test_an_output_layer_in_slices_is_the_same_alone_and_in_any_step():
    """``VocabularySlices`` multiplies each slice of the vocabulary by every block of a step: a row's
    logits are bitwise the same alone and among 60 other rows, and within float rounding of the
    whole matrix's product (bitwise on an AVX-512 CPU, not with AVX2's kernels)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 1000)
    sliced = cpu_arithmetic.VocabularySlices(linear, slice_bytes=96 * 128 * 4)
    assert len(sliced._bounds) == 8 and sliced._bounds[-1] == (896, 1000) and sliced.weight is linear.weight
    layer = cpu_arithmetic.StepRows(sliced)
    rows = torch.randn(61, 1, 96)
    together = layer(rows)
    for i in (0, 17, 60):
        assert torch.equal(layer(rows[i : i + 1]), together[i : i + 1])
        assert torch.equal(layer(torch.cat([rows[i : i + 1], torch.randn(20, 1, 96)]))[:1], together[i : i + 1])
    with torch.inference_mode():
        assert torch.allclose(together, linear(rows), rtol=1e-5, atol=1e-6)
        prompt = torch.randn(1, 33, 96)
        assert torch.allclose(layer(prompt), linear(prompt), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="float32 nn.Linear"):
        cpu_arithmetic.VocabularySlices(torch.nn.Linear(4, 4).to(torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_tokens_are_argmax_ties_included(dtype):
    """Greedy decoding's token is ``argmax``'s: the first of several equal largest logits (ties are
    common among bfloat16's 8-bit mantissas)."""
    torch.manual_seed(0)
    logits = (torch.randn(8, 5000) * 3).round().to(dtype)
    top = logits.max(-1, keepdim=True).values
    logits.scatter_(1, torch.randint(0, 5000, (8, 3)), top.expand(8, 3))
    assert torch.equal(hf_engine.greedy_tokens(logits), logits.argmax(-1))
    assert all(int(hf_engine.greedy_tokens(row)) == int(row.argmax()) for row in logits)


packing_only = pytest.mark.skipif(
    not cpu_arithmetic.bfloat16_packing_supported(), reason="oneDNN packs bfloat16 weights on AVX-512 BF16 or AMX"
)


@packing_only
def test_a_packed_bfloat16_linear_is_the_plain_product():
    """``PackedBfloat16Linear`` only moves the weight's reordering out of the call: its output is
    bitwise ``F.linear``'s on the same contiguous operands, for a step's rows and a prompt's tokens."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 200).to(torch.bfloat16)
    packed = cpu_arithmetic.PackedBfloat16Linear(linear)
    plain = lambda x: torch.nn.functional.linear(x.contiguous(), linear.weight, linear.bias)  # noqa: E731
    for shape in ((1, 96), (16, 96), (33, 96), (1, 57, 96), (3, 1, 96)):
        x = torch.randn(*shape, dtype=torch.bfloat16)
        assert torch.equal(packed(x), plain(x)), shape
    strided = torch.randn(2, 9, 96, dtype=torch.bfloat16)[:, 1:]
    assert torch.equal(packed(strided), plain(strided))
    with pytest.raises(TypeError, match="bfloat16"):
        cpu_arithmetic.PackedBfloat16Linear(torch.nn.Linear(4, 4))


@packing_only
@pytest.mark.slow  # loads a model
def test_bfloat16_layers_are_packed_once_and_keyed(tmp_path):
    path = tmp_path / "tiny"
    gen = load_generator(write_tiny_llama(path, "bos", seed=6), {**tiny_spec(path), "dtype": "bfloat16"})
    model = gen.model
    wrapped = [m.linear for m in model.modules() if isinstance(m, cpu_arithmetic.StepRows)]
    assert len(wrapped) > 10 and all(isinstance(m, cpu_arithmetic.PackedBfloat16Linear) for m in wrapped)
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert gen.store_key_extras()["bfloat16"] == cpu_arithmetic.BFLOAT16_RECIPE


@int8_only
def test_int8_layers_and_the_output_layer_are_wrapped_in_step_rows(tmp_path):
    path = tmp_path / "tiny"
    gen = load_generator(write_tiny_llama(path, "bos", seed=6), {**tiny_spec(path), "dtype": "int8"})
    model = gen.model
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear | Int8RowLinear | VocabularySlices)]
    wrapped = [m.linear for m in model.modules() if isinstance(m, cpu_arithmetic.StepRows)]
    assert len(linears) == len(wrapped) > 5 and all(any(w is m for w in wrapped) for m in linears)
    shared = [m for m in model.modules() if isinstance(m, cpu_arithmetic.SharedInputLinears)]
    assert shared and all(any(w is s.linear.linear for w in wrapped) for s in shared)
    head = model.get_output_embeddings()
    assert isinstance(head, cpu_arithmetic.ShortlistHead)  # greedy steps from an int8 shortlist
    assert isinstance(head.layer, cpu_arithmetic.StepRows) and isinstance(head.layer.linear, VocabularySlices)
    assert sum(isinstance(m, Int8RowLinear) for m in linears) == len(linears) - 1  # all but the output layer


@pytest.mark.slow  # loads a model
def test_a_reused_prefix_gives_the_logits_and_states_of_a_fresh_computation(tiny_fp32):
    model = tiny_fp32.model
    first, second = (tiny_fp32.encode(p) for p in PROMPTS[:2])
    longer = first + second
    warm = hf_engine.PrefixCache()
    with torch.inference_mode():
        hf_engine.prefill(model, first, warm)
        kv_reused, logits_reused = hf_engine.prefill(model, longer, warm, keep=4)
        kv_fresh, logits_fresh = hf_engine.prefill(model, longer, hf_engine.PrefixCache(), keep=4)
    reused = len(first) - len(first) % hf_engine.PREFILL_ROWS  # whole blocks
    assert reused > 0 and warm.reused_tokens == reused and warm.computed_tokens == len(longer) + len(first) - reused
    # Equal up to float32 rounding: the suffix is a product of fewer rows (1.5e-5 apart on values of
    # up to 9 with AVX2's kernels, ATEN_CPU_CAPABILITY=avx2).
    assert torch.allclose(logits_reused, logits_fresh, rtol=1e-5, atol=1e-4)
    for (k1, v1), (k2, v2) in zip(kv_reused, kv_fresh):
        assert torch.allclose(k1, k2, rtol=1e-5, atol=1e-4) and torch.allclose(v1, v2, rtol=1e-5, atol=1e-4)


PASSAGES = [
    "Thimphu is the capital and largest city of Bhutan, in the western central part of the country.",
    "Lima is the capital of Peru. It lies on the coast of the Pacific ocean and is home to ten million people.",
    "The Atacama Desert in the north of Chile is one of the driest places on Earth.",
    "Oslo is the capital of Norway; it lies at the head of the Oslofjord.",
]
QUESTIONS = ["What is the capital of Bhutan?", "Which desert is the driest?", "Where does Oslo lie?"]


@pytest.mark.slow  # loads both demo models
@int8_only
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_an_int8_prompt_after_a_reused_prefix_is_bitwise_the_whole_prompt(name):
    """The generation store keys a call without the job's earlier calls, so in int8 a prompt
    prefilled after the cached prefix of an earlier one must be bitwise the prompt computed whole:
    the same logits and the same keys and values, at every layer. Real prompts of the demo models
    (an instruction, passages, a question), sharing prefixes of many lengths, so that the computed
    suffixes end in every size of last block."""
    import yaml

    from llm_utility.generation import materialize
    from test_independent_checks import REPO

    spec = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["llms"][name]
    manifest = materialize(name, spec, REPO / "resources" / "models" / name)
    gen = load_generator(manifest, {**spec, "dtype": "int8", "keep_loaded": None})
    model = gen.model
    assert model.config._attn_implementation == hf_engine.BLOCKED_ATTENTION
    instruction = "Answer the question from the information below, in a few words.\nInformation:"
    prompts = [
        gen.encode(gen.render(f"{instruction} {' '.join(PASSAGES[: 1 + i % 4])}\nQuestion: {q}\nAnswer:"))
        for i, q in enumerate(QUESTIONS * 2)
    ]
    prompts += [prompts[0][: len(prompts[0]) - cut] for cut in range(1, 18, 2)]  # every size of last block
    warm, suffixes = hf_engine.PrefixCache(), set()
    with torch.inference_mode(), cpu_arithmetic.argmax_only(model):
        for ids in prompts:
            keep = 1 + len(ids) % 3  # 1 (a generation) or more (a score's target)
            before = warm.reused_tokens
            kv_reused, logits_reused = hf_engine.prefill(model, ids, warm, keep=keep)
            kv_whole, logits_whole = hf_engine.prefill(model, ids, hf_engine.PrefixCache(0), keep=keep)
            if warm.reused_tokens > before:
                suffixes.add((len(ids) - (warm.reused_tokens - before)) % hf_engine.PREFILL_ROWS)
            assert torch.equal(logits_reused, logits_whole)
            for (k1, v1), (k2, v2) in zip(kv_reused, kv_whole, strict=True):
                assert torch.equal(k1, k2) and torch.equal(v1, v2)
    assert warm.reused_tokens > warm.computed_tokens / 4  # prefixes really were reused
    assert len(suffixes) >= 6  # and the computed parts ended in blocks of many sizes


def test_prefix_cache_finds_the_longest_prefix_and_forgets_the_least_recent():
    kv = lambda n: [(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2))]  # noqa: E731
    cache = hf_engine.PrefixCache(max_bytes=2 * 20 * 2 * 4 * 2, block=1)  # room for two 20-token entries
    a, b = list(range(20)), list(range(10)) + list(range(100, 110))
    cache.add(a, kv(20))
    cache.add(b, kv(20))
    n, found = cache.longest_prefix(list(range(15)) + [7, 7], limit=16)
    assert n == 15 and found[0][0].shape[2] == 15  # from a
    assert cache.longest_prefix(list(range(10)) + list(range(100, 120)), limit=30)[0] == 20  # all of b
    assert cache.longest_prefix(a, limit=12)[0] == 12  # never more than the limit
    assert cache.longest_prefix([5] * 30, limit=30) == (0, None)  # nothing shared
    cache.add(list(range(200, 220)), kv(20))  # a third entry drops the least recently used (b)
    assert cache.longest_prefix(b, limit=20)[0] == 10  # only a's first ten tokens are left


def test_a_reused_prefix_is_whole_blocks():
    kv = lambda n: [(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2))]  # noqa: E731
    cache = hf_engine.PrefixCache(block=4)
    cache.add(list(range(20)), kv(20))
    n, found = cache.longest_prefix(list(range(15)) + [7, 7], limit=16)
    assert n == 12 and found[0][0].shape[2] == 12  # 15 shared tokens: three whole blocks
    assert cache.longest_prefix(list(range(3)) + [9] * 10, limit=13) == (0, None)  # not one block
    assert cache.longest_prefix(list(range(20)), limit=18)[0] == 16  # the limit, rounded down too
    assert hf_engine.PrefixCache().block == hf_engine.PREFILL_ROWS == cpu_arithmetic.STEP_ROWS


def test_decoding_batches_bound_memory_and_padding():
    lengths = [600, 590, 560, 450, 440, 300, 40]
    groups = hf_engine.decode_groups(lengths, token_bytes=1000, max_bytes=2_000_000)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert groups == [[0, 1, 2], [3, 4], [5], [6]]
    for g in groups:
        assert len(g) * lengths[g[0]] * 1000 <= 2_000_000 or len(g) == 1
        assert all(4 * lengths[i] >= 3 * lengths[g[0]] for i in g)


@pytest.mark.slow  # loads a model
@int8_only
def test_int8_scores_are_a_direct_unbatched_call_of_the_same_int8_model(tiny_int8):
    """The independent check of scoring, in int8: the engine (prefix reuse, kept logits) against
    one plain forward pass of the same quantized model."""
    gen = tiny_int8
    pairs = [(p, " Lima is the capital of Peru.") for p in PROMPTS] + [("", PROMPTS[2])]
    got = gen.score(pairs)
    for (prompt, target), scores in zip(pairs, got):
        ids, tid = gen.encode(prompt) if prompt else [], gen.tokenizer(target, add_special_tokens=False)["input_ids"]
        assert scores == pytest.approx(direct_target_logprobs(gen.model, ids, tid), abs=1e-4)


# --- the int8 shortlist of greedy steps ---------------------------------------------------------------


def _shortlist_head(weight: torch.Tensor) -> cpu_arithmetic.ShortlistHead:
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data = weight
    return cpu_arithmetic.ShortlistHead(cpu_arithmetic.StepRows(VocabularySlices(linear, slice_bytes=1 << 16)))


def _correctly_rounded_logits(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Each float32 logit's exact value rounded once to float64, whatever a GEMM's order: a product
    of two float32 numbers is exact in float64, and ``math.fsum`` rounds their sum once. Twin
    tokens get the same logit, so ``argmax`` breaks their tie to the first."""
    products = (x.double()[:, None, :] * weight.double()[None]).tolist()
    return torch.tensor([[math.fsum(token) for token in row] for row in products], dtype=torch.float64)


def _hard_rows(d: int, n: int) -> torch.Tensor:
    """Hidden states as small LLMs make them (a few channels tens of times the rest), and harder:
    one huge channel, a tiny row, a row of one sign."""
    torch.manual_seed(1)
    rows = torch.randn(n, d) * 2
    rows[:, 3] *= 25
    rows[1, 7] = 3e4
    rows[2] *= 1e-6
    rows[3] = rows[3].abs()
    return rows


@int8_only
def test_a_shortlist_heads_bound_holds_for_every_logit():
    """Every logit computed in float64 lies within the bound the int8 product gives it (the bound
    is what makes the shortlist exact), on rows built to stress it and on weights with outlier
    tokens. Halving the per-token weight error it adds fails this test."""
    torch.manual_seed(0)
    weight = torch.randn(3000, 96) * 0.05
    weight[:40] *= 20  # tokens with large embeddings
    head = _shortlist_head(weight)
    # Rows along the int8 rounding error of a few tokens (int8 per output channel, written out),
    # where the bound's Cauchy-Schwarz step is nearly an equality.
    scales = weight.abs().amax(dim=1, keepdim=True) / 127
    error = weight - torch.round(weight / scales) * scales
    aligned = torch.cat([error[[5, 77]], -error[[2999]]]) * torch.tensor([[300.0], [-3000.0], [10.0]])
    x = torch.cat([_hard_rows(96, 24), aligned])
    low, high, c = head.bounds(x)
    exact = x.double() @ weight.double().t()
    assert (exact >= low.double() - c[:, None]).all() and (exact <= high.double() + c[:, None]).all()
    middle, width = (high.double() + low.double()) / 2, (high.double() - low.double()) / 2 + c[:, None]
    assert float(((exact - middle).abs() / width).max()) > 0.6  # the bound is nearly reached


@int8_only
def test_a_shortlist_heads_int8_slices_are_bitwise_one_product(monkeypatch):
    """The int8 weights packed in slices of tokens (7 here, the last one short) give bitwise the
    bounds of one product over the whole vocabulary, and the same greedy tokens."""
    torch.manual_seed(0)
    weight = torch.randn(2000, 64) * 0.05
    x = _hard_rows(64, 20)
    whole = _shortlist_head(weight)
    whole.prepare()
    assert len(whole._packed) == 1
    monkeypatch.setattr(cpu_arithmetic, "_SHORTLIST_SLICE_BYTES", 300 * 64)
    sliced = _shortlist_head(weight)
    sliced.prepare()
    assert [p.unpack()[0].shape[0] for p in sliced._packed] == [300] * 6 + [200]
    for a, b in zip(whole.bounds(x), sliced.bounds(x), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(whole.greedy_logits(x), sliced.greedy_logits(x))


@int8_only
def test_a_shortlist_heads_greedy_token_is_the_float64_argmax_alone_and_in_any_batch():
    """Inside ``argmax_only`` each row's logits are -inf but at the largest of the logits computed
    in float64, ties to the first, near-ties (1e-9 apart, below float32's resolution) decided as
    float64 decides them; a row's logits are bitwise the same alone and among others; outside, the
    layer is the float32 one it wraps."""
    torch.manual_seed(0)
    d = 64
    weight = torch.randn(2000, d) * 0.05
    x = _hard_rows(d, 20)
    exact = x.double() @ weight.double().t()
    # Row 0's best token gets an exact twin further down, and a near-twin first in the vocabulary
    # whose float64 logit is smaller by about float32's resolution (one unit in the last place of
    # one weight, in its largest channel).
    best, channel = int(exact[0].argmax()), int(x[0].abs().argmax())
    assert 0 < best < 1500
    weight[1500] = weight[best]
    weight[0] = weight[best]
    toward = -torch.inf if x[0, channel] > 0 else torch.inf
    weight[0, channel] = torch.nextafter(weight[best, channel], torch.tensor(toward))
    head = _shortlist_head(weight)
    exact = _correctly_rounded_logits(x, weight)
    assert float(exact[0, best] - exact[0, 0]) < 1e-5 * float(exact[0, best].abs())
    head.argmax_only = True
    together = head(x[:, None, :])[:, 0]
    alone = torch.cat([head(x[i : i + 1, None, :])[:, 0] for i in range(len(x))])
    head.argmax_only = False
    assert torch.equal(together, alone)
    assert torch.equal(together.max(-1).indices, exact.argmax(-1))
    assert int(together[0].argmax()) == best and float(exact[0, 0]) < float(exact[0, best])
    assert (torch.isfinite(together).sum(-1) == 1).all()
    assert not head.argmax_only and torch.equal(head(x[:, None, :]), head.layer(x[:, None, :]))


@pytest.mark.slow  # loads a model
@int8_only
def test_int8_greedy_steps_decode_what_transformers_decodes_from_the_whole_output_layer(tiny_int8):
    """The engine's int8 greedy steps take each token from the int8 shortlist (``ShortlistHead``);
    transformers' own ``generate`` on the same model reads the whole float32 output layer. They
    decode the same tokens, and the engine leaves the shortlist off for everything else."""
    gen = tiny_int8
    head = gen.model.get_output_embeddings()
    assert isinstance(head, cpu_arithmetic.ShortlistHead)
    ours = gen.generate(PROMPTS, max_new_tokens=12)
    assert head._packed is not None and not head.argmax_only  # it was used, and is off again
    assert len(set(ours)) > 3 and ours == [direct_greedy(gen, p, 12, []) for p in PROMPTS]
