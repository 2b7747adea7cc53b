"""Every reported quantity family checked against an independent computation written out here, never
against the project's own helpers: scores and perplexities against direct unbatched transformers
calls, attention against ``output_attentions=True``, answers' correctness against DPR's rule
written out, gold sets against Eq. 1-2, set metrics against the paper's formulas, ranking metrics
against trec_eval (pytrec_eval, called directly), bootstrap intervals against scipy and a
written-out percentile bootstrap.

Scoring runs on tiny random Llama models built here (fast tier), with a tokenizer that adds a BOS
token, one that has none (Qwen3's kind) and one that names a BOS but does not add it (SmolLM2's
kind), and on both demo models (slow tier).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import unicodedata
from pathlib import Path

import pytest
import regex
import torch

REPO = Path(__file__).resolve().parents[1]

# Tokenizer kinds: (bos_token, whether encoding adds it).
BOS_KINDS = {"bos": ("<s>", True), "no_bos": (None, False), "bos_not_added": ("<s>", False)}
WORDS = (
    "Information: Lima is the capital of Peru. Question: What is the capital of Peru? Answer: "
    "Santiago Chile Oslo Norway lies on the coast of the Pacific ocean, and is home to ten million "
    "people [1] [2] > , . ? 0123456789"
)


def write_tiny_llama(path: Path, kind: str, seed: int = 0) -> dict:
    """A random 2-layer Llama with a trained byte-level BPE tokenizer of the given BOS ``kind``,
    saved as a model folder; returns its manifest. The weights are drawn with a large initializer
    range, so next-token distributions are peaked and an off-by-one position changes every score."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bos, adds = BOS_KINDS[kind]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<pad>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([WORDS], trainer)
    if adds:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token="</s>", pad_token="<pad>")
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.5,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    manifest = {
        "slug": f"tiny-{kind}",
        "backend": "transformers",
        "load_path": str(path),
        "fingerprint": f"tiny:{kind}:{seed}",
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def tiny_spec(path: Path, batch_size: int = 8) -> dict:
    return {
        "backend": "transformers",
        "weights": {"path": str(path)},
        "prompt_format": "completion",
        "batch_size": batch_size,
        "stop": ["\n"],
    }


_TINY: dict[str, object] = {}


def _tiny(kind: str, factory: pytest.TempPathFactory):
    """The tiny model of one BOS kind, built once per session."""
    from llm_utility.generation import load_generator

    if kind not in _TINY:
        path = factory.mktemp(f"tiny-{kind}")
        gen = load_generator(write_tiny_llama(path, kind), tiny_spec(path))
        gen.kind = kind
        _TINY[kind] = gen
    return _TINY[kind]


@pytest.fixture(scope="module", params=sorted(BOS_KINDS))
def tiny(request, tmp_path_factory):
    return _tiny(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=["bos", "no_bos"])
def tiny_job_model(request, tmp_path_factory):
    """The judge-job checks run on a model with and one without a BOS token (the third kind differs
    only in how a prompt that starts with the BOS text is encoded, which these prompts never do)."""
    return _tiny(request.param, tmp_path_factory)


# --- the independent computations ------------------------------------------------------------------


def direct_target_logprobs(model, prompt_ids: list[int], target_ids: list[int]) -> list[float]:
    """log P(token j | tokens < j) for every target position j >= 1 of prompt_ids + target_ids: one
    unpadded forward pass, explicit log-softmax and gather."""
    ids = prompt_ids + target_ids
    if len(ids) < 2:
        return []
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return [float(logprobs[j - 1, ids[j]]) for j in range(max(len(prompt_ids), 1), len(ids))]


def direct_perplexity(model, tokenizer, text: str) -> float:
    """exp of transformers' own causal-LM loss on the text with the tokenizer's special tokens."""
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.inference_mode():
        return math.exp(float(model(ids, labels=ids).loss))


# --- scores: every prompt shape ------------------------------------------------------------------

PASSAGE = "Lima Lima is the capital of Peru. Lima lies on the coast of the Pacific ocean."
SHAPES = [
    ("", PASSAGE),  # a passage's perplexity: empty prompt
    ("", "Lima"),  # empty prompt, short target
    ("Question: What is the capital of Peru? Answer:", " Lima"),  # the likelihood shape
    ("Peru?", " Lima is the capital of Peru, and Santiago is the capital of Chile."),  # target longer than prompt
    (
        "Information: Oslo lies on the coast of Norway. Lima is the capital of Peru. "
        "Question: What is the capital of Peru? Answer:",
        " Lima",
    ),
    ("", "Question: What is the capital of Chile? Santiago is the capital of Chile."),  # the query+passage shape
]


def test_score_matches_a_direct_unbatched_computation_for_every_prompt_shape(tiny):
    """One left-padded batch of mixed prompt and target lengths (empty prompts among long ones) and
    every pair on its own agree with the direct computation."""
    prompts = [tiny.encode(p) for p, _ in SHAPES]
    assert (
        len(
            {
                len(p) + len(tiny.tokenizer(t, add_special_tokens=False)["input_ids"])
                for (_, t), p in zip(SHAPES, prompts)
            }
        )
        >= 5
    )
    bos, adds = BOS_KINDS[tiny.kind]
    assert tiny.encode("") == ([tiny.tokenizer.convert_tokens_to_ids(bos)] if adds else [])
    batched = tiny.score(SHAPES)
    single = [tiny.score([pair])[0] for pair in SHAPES]
    for (prompt, target), ids, got_batched, got_single in zip(SHAPES, prompts, batched, single):
        target_ids = tiny.tokenizer(target, add_special_tokens=False)["input_ids"]
        expected = direct_target_logprobs(tiny.model, ids, target_ids)
        # Without a BOS token nothing predicts the first token of an empty prompt's target.
        assert len(expected) == len(target_ids) - (0 if ids else 1)
        assert got_single == pytest.approx(expected, abs=1e-4)
        assert got_batched == pytest.approx(expected, abs=1e-4)


def test_the_check_would_catch_a_shifted_position(tiny):
    """The tiny model's distributions are peaked: reading the logits one position off (the old bug)
    changes the scores by far more than the tolerance above."""
    ids = tiny.tokenizer(PASSAGE, add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        logprobs = torch.log_softmax(tiny.model(torch.tensor([ids])).logits[0].float(), -1)
    right = [float(logprobs[j - 1, ids[j]]) for j in range(1, len(ids))]
    shifted = [float(logprobs[j, ids[j]]) for j in range(1, len(ids))]
    assert max(abs(a - b) for a, b in zip(right, shifted)) > 0.5


def test_perplexity_is_transformers_own_loss_after_the_tokenizers_special_tokens(tiny):
    from llm_utility.method.perplexity import perplexity

    texts = [PASSAGE, "What is the capital of Peru? " + PASSAGE, "Oslo Norway"]
    scored = tiny.score([("", t) for t in texts])
    for text, logprobs in zip(texts, scored):
        assert perplexity(logprobs) == pytest.approx(direct_perplexity(tiny.model, tiny.tokenizer, text), rel=1e-4)


def test_empty_and_one_token_targets(tiny):
    one = tiny.tokenizer.convert_ids_to_tokens(tiny.tokenizer("Lima", add_special_tokens=False)["input_ids"][:1])
    word = tiny.tokenizer.convert_tokens_to_string(one)
    got = tiny.score([("", ""), ("Peru?", ""), ("", word), ("Peru?", word)])
    assert got[0] == [] and got[1] == []
    assert len(got[2]) == (1 if BOS_KINDS[tiny.kind][1] else 0)  # no context without a BOS token
    assert len(got[3]) == 1


def test_a_batch_split_for_logits_memory_gives_the_same_scores(tiny, monkeypatch):
    import llm_utility.generation.hf_backend as hf

    whole = tiny.score(SHAPES)
    monkeypatch.setattr(hf, "SCORE_LOGITS_BYTES", 1)  # every batch splits down to one row
    for split, row in zip(tiny.score(SHAPES), whole):
        assert split == pytest.approx(row, abs=1e-5)


def test_vllm_scoring_reads_prompt_logprobs_as_vllm_defines_them(tiny, monkeypatch):
    """vLLM's ``prompt_logprobs`` (``vllm.logprobs.PromptLogprobs``): one entry per prompt token, entry
    i the log-probability of token i given tokens 0..i-1, None for token 0. A stand-in engine builds
    exactly that from the tiny model, and the vLLM backend's scores must equal the direct computation
    for every prompt shape (so both backends share one convention)."""
    import sys
    import types

    from llm_utility.generation import load_generator

    def engine_generate(requests, params, use_tqdm=True):
        out = []
        for request in requests:
            ids = request["prompt_token_ids"]
            assert ids, "vLLM rejects an empty prompt"
            with torch.inference_mode():
                logprobs = torch.log_softmax(tiny.model(torch.tensor([ids])).logits[0].float(), -1)
            entries = [None] + [
                {ids[i]: types.SimpleNamespace(logprob=float(logprobs[i - 1, ids[i]]))} for i in range(1, len(ids))
            ]
            out.append(types.SimpleNamespace(prompt_logprobs=entries, outputs=[types.SimpleNamespace(text="x")]))
        return out

    fake = types.SimpleNamespace(
        LLM=lambda **kw: types.SimpleNamespace(generate=engine_generate),
        SamplingParams=lambda **kw: types.SimpleNamespace(**kw),
    )
    monkeypatch.setitem(sys.modules, "vllm", fake)
    manifest = {**tiny.manifest, "backend": "vllm"}
    vllm_gen = load_generator(manifest, {**tiny_spec(Path(tiny.load_path)), "backend": "vllm", "gpu": 1})
    pairs = [*SHAPES, ("", ""), ("Peru?", "")]
    for (prompt, target), got in zip(pairs, vllm_gen.score(pairs)):
        expected = direct_target_logprobs(
            tiny.model, tiny.encode(prompt), tiny.tokenizer(target, add_special_tokens=False)["input_ids"]
        )
        assert got == pytest.approx(expected, abs=1e-5)


# --- the demo models (slow tier) -----------------------------------------------------------------


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def demo_model(request):
    """A demo model as the demo config specifies it, from resources/models (materialized there once),
    in float32 on any CPU: the demo's ``dtype: auto`` would take bfloat16 where the CPU has AMX, and
    these checks compare batched with unbatched calls at float32's precision."""
    import yaml

    from llm_utility.generation import load_generator, materialize

    spec = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["llms"][request.param]
    manifest = materialize(request.param, spec, REPO / "resources" / "models" / request.param)
    return load_generator(manifest, {**spec, "dtype": "float32", "keep_loaded": None})  # its .model, here


@pytest.mark.slow
def test_demo_models_score_every_prompt_shape_as_a_direct_computation(demo_model):
    gen = demo_model
    question = "What is the capital of Bhutan?"
    passage = "Bhutan Thimphu is the capital and largest city of Bhutan, in the western central part of the country."
    answer_prompt = gen.render(f"Information: {passage}\nQuestion: {question}\nAnswer:")
    pairs = [
        ("", passage),  # Figure 4's passage perplexity
        ("", f"{question} {passage}"),  # and its query+passage perplexity
        (answer_prompt, " Thimphu"),  # Eq. 7's likelihood shape
        (gen.render(question), " The capital of Bhutan is Thimphu, a city in the western central part of the country."),
        (gen.render("Bhutan?"), passage),  # a target longer than its prompt
    ]
    batched = gen.score(pairs)
    for (prompt, target), got in zip(pairs, batched):
        prompt_ids = gen.encode(prompt)
        expected = direct_target_logprobs(
            gen.model, prompt_ids, gen.tokenizer(target, add_special_tokens=False)["input_ids"]
        )
        assert got == pytest.approx(expected, abs=5e-4)
    from llm_utility.method.perplexity import perplexity

    for text, logprobs in zip([passage, f"{question} {passage}"], batched):
        direct = direct_perplexity(gen.model, gen.tokenizer, text)
        print(
            f"\n{gen.slug}: perplexity {perplexity(logprobs):.2f}, transformers' loss gives {direct:.2f}: {text[:40]!r}"
        )
        assert perplexity(logprobs) == pytest.approx(direct, rel=1e-3)
        assert direct < 1000  # a real model reads its own language: no perplexity in the tens of thousands


# --- what the judge job reports: perplexity rows, likelihood and attention rankings --------------

JOB_QUERIES = [
    # qid, question, answers, human pids
    ("q1", "What is the capital of Peru?", ["Lima"], ["h1", "p2"]),
    ("q2", "What is the capital of Chile?", ["Santiago"], ["h2"]),
]
JOB_PASSAGES = {
    "p1": ("Peru", "Lima is the capital of Peru."),
    "p2": ("Chile", "Santiago is the capital of Chile, on the Pacific coast."),
    "p3": ("Norway", "Oslo lies on the coast of Norway."),
    "h1": ("Lima", "Lima lies on the coast; Lima is the capital of Peru."),
    "h2": ("Santiago", "Santiago is home to ten million people."),
}
JOB_RUN = {"q1": ["p3", "p1", "p2"], "q2": ["p2", "p3", "p1"]}
JOB_GOLD_U = [("q1", "h1"), ("q2", "p1")]  # q1: h1 in its gold set, p2 not; q2: its human h2 not
JOB_PSEUDO = {"q1": "Lima", "q2": "Santiago is the capital"}


def _judge_job_files(tmp: Path) -> dict[str, str]:
    """The input files of a judge job on JOB_QUERIES, written into ``tmp``."""
    import polars as pl

    from llm_utility import pipeline

    queries = pl.DataFrame(
        [(q, text, ans, human, "qa") for q, text, ans, human in JOB_QUERIES],
        schema={
            "qid": pl.String,
            "question": pl.String,
            "answers": pl.List(pl.String),
            "human_pids": pl.List(pl.String),
            "task": pl.String,
        },
        orient="row",
    )
    queries.write_parquet(tmp / "queries.parquet")
    pl.DataFrame(
        [(p, t, x) for p, (t, x) in JOB_PASSAGES.items()], schema=["pid", "title", "text"], orient="row"
    ).write_parquet(tmp / "passages.parquet")
    run = [(q, p, r, 1.0 / r) for q, ps in JOB_RUN.items() for r, p in enumerate(ps, 1)]
    pl.DataFrame(
        run, schema={"qid": pl.String, "pid": pl.String, "rank": pl.Int32, "score": pl.Float32}, orient="row"
    ).write_parquet(tmp / "run.parquet")
    pl.DataFrame(JOB_GOLD_U, schema=["qid", "pid"], orient="row").write_parquet(tmp / "gold_U.parquet")
    pl.DataFrame(list(JOB_PSEUDO.items()), schema=["qid", "output"], orient="row").write_parquet(tmp / "topk.parquet")
    pipeline.candidates_job(
        queries=str(tmp / "queries.parquet"),
        run=str(tmp / "run.parquet"),
        passages=str(tmp / "passages.parquet"),
        top_k=3,
        output=str(tmp / "candidates.parquet"),
    )
    names = ("queries", "candidates", "gold_U", "topk")
    return {name: str(tmp / f"{name}.parquet") for name in names}


@pytest.fixture(scope="module")
def judged(tiny_job_model, tmp_path_factory):
    """One judge job of the tiny model (likelihood and attention rankings, perplexities) on files
    written here; returns its output tables."""
    tiny = tiny_job_model
    import polars as pl

    from llm_utility import pipeline
    from llm_utility.config import with_defaults

    tmp = tmp_path_factory.mktemp(f"judge-{tiny.kind}")
    files = _judge_job_files(tmp)
    rankings = {m: str(tmp / f"{m}.parquet") for m in ("likelihood", "attention")}
    pipeline.judge_job(
        dataset="tiny",
        queries=files["queries"],
        candidates=files["candidates"],
        manifest=str(Path(tiny.load_path) / "manifest.json"),
        prompts=str(REPO / "config" / "prompts.yaml"),
        spec=with_defaults("llms", tiny_spec(Path(tiny.load_path), batch_size=3)),
        store=str(tmp / "store"),
        job="judge",
        judgments={},
        rankings=rankings,
        perplexity=str(tmp / "perplexity.parquet"),
        gold_U=files["gold_U"],
        pseudo_answers={"topk": files["topk"]},
        max_new_tokens={},
        rankings_cfg=with_defaults("rankings", {}),
    )
    return {
        name: pl.read_parquet(path)
        for name, path in {**rankings, "perplexity": str(tmp / "perplexity.parquet")}.items()
    }


def test_verbalized_methods_decoded_together_give_each_prompts_own_greedy_output(tmp_path, monkeypatch, caplog):
    """A judge job decodes its verbalized methods together, one model call per output limit (the
    listwise selections and the listwise ranking share their decoding steps): every output it stored
    is what plain transformers decodes greedily for that prompt alone, and each method's calls are
    still counted as its own."""
    import logging
    import sqlite3

    import polars as pl
    from polars.testing import assert_frame_equal
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llm_utility import pipeline
    from llm_utility.config import with_defaults
    from llm_utility.generation.hf_backend import HFGenerator

    path = tmp_path / "tiny"
    write_tiny_llama(path, "bos", seed=3)
    calls = []
    generate = HFGenerator.generate

    def recorded(self, prompts, max_new_tokens, stop=()):
        calls.append((len(prompts), max_new_tokens))
        return generate(self, prompts, max_new_tokens, stop)

    monkeypatch.setattr(HFGenerator, "generate", recorded)
    files = _judge_job_files(tmp_path)
    caplog.set_level(logging.INFO, logger="llm_utility")

    def judge(out, judgments, rankings):
        """One judge job, writing its tables and its store into ``out``; returns the tables."""
        out.mkdir()
        pipeline.judge_job(
            dataset="tiny",
            queries=files["queries"],
            candidates=files["candidates"],
            manifest=str(path / "manifest.json"),
            prompts=str(REPO / "config" / "prompts.yaml"),
            spec=with_defaults("llms", {**tiny_spec(path, batch_size=16), "dtype": "float32", "max_model_len": 2048}),
            store=str(out / "store"),
            job="judge",
            judgments={m: str(out / f"{m}.parquet") for m in judgments},
            rankings={m: str(out / f"rank_{m}.parquet") for m in rankings},
            pseudo_answers={"topk": files["topk"]},
            max_new_tokens={"pointwise": 24, "listwise": 64},
            rankings_cfg={**with_defaults("rankings", {}), "max_new_tokens": 64},
        )
        return {p.stem: pl.read_parquet(p) for p in out.glob("*.parquet")}

    selections = ("pointwise_pa", "listwise_pa", "listwise_pa_reject")
    together = judge(tmp_path / "together", selections, ["listwise_pa"])
    # 2 queries: 3 x 2 pointwise prompts with a limit of 24; 3 methods x 2 listwise prompts with 64.
    assert sorted(calls) == [(6, 24), (6, 64)]
    (shard,) = (tmp_path / "together" / "store").glob("*.sqlite")
    with contextlib.closing(sqlite3.connect(shard)) as db:
        rows = db.execute("SELECT prompt, value, params FROM calls WHERE kind = 'generate'").fetchall()
    assert len(rows) == 12
    plain = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    for prompt, value, params in rows:
        ids = torch.tensor([tokenizer(prompt)["input_ids"]])
        with torch.inference_mode():
            out = plain.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=json.loads(params)["max_new_tokens"],
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
        text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True).lstrip()
        assert value == text.split("\n")[0].strip()  # the stop string "\n", written out
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("store_stats ")]
    stats = json.loads(line.removeprefix("store_stats "))
    made = {method: kinds["generate"]["made"] for method, kinds in stats["methods"].items()}
    assert made == {"pointwise_pa": 6, "listwise_pa": 2, "listwise_pa_reject": 2, "rank_listwise_pa": 2}
    seconds = sum(kinds["generate"]["seconds"] for kinds in stats["methods"].values())
    assert seconds == pytest.approx(stats["calls"]["generate"]["seconds"])
    # Each method in a job of its own (its own store, its prompts decoded alone) gives the same table.
    alone = {}
    for m in selections:
        alone |= judge(tmp_path / m, [m], [])
    alone |= judge(tmp_path / "rank", [], ["listwise_pa"])
    assert sorted(calls[2:]) == [(2, 64)] * 3 + [(6, 24)]
    assert set(alone) == set(together) == {*selections, "rank_listwise_pa"}
    for name, table in together.items():
        assert_frame_equal(table, alone[name], check_exact=True)


def _answer_prompt_written_out(question: str, pids: list[str]) -> str:
    import yaml

    wording = yaml.safe_load((REPO / "config" / "prompts.yaml").read_text())["answer"]["qa"]["with_passages"]
    return wording.format(
        question=question, passages="\n".join(f"{JOB_PASSAGES[p][0]} {JOB_PASSAGES[p][1]}" for p in pids)
    )


def test_perplexity_rows_are_transformers_own_loss(tiny_job_model, judged):
    tiny = tiny_job_model
    table = judged["perplexity"].sort("qid", "pid")
    questions = {q: text for q, text, _, _ in JOB_QUERIES}
    assert table.select("qid", "pid", "in_gold").rows() == [
        ("q1", "h1", True),
        ("q1", "p2", False),
        ("q2", "h2", False),
    ]
    for qid, pid, _, ppl_passage, ppl_query_passage in table.iter_rows():
        title, text = JOB_PASSAGES[pid]
        assert ppl_passage == pytest.approx(direct_perplexity(tiny.model, tiny.tokenizer, f"{title} {text}"), rel=1e-4)
        assert ppl_query_passage == pytest.approx(
            direct_perplexity(tiny.model, tiny.tokenizer, f"{questions[qid]} {title} {text}"), rel=1e-4
        )


def test_likelihood_ranking_is_the_log_probability_of_the_pseudo_answer(tiny_job_model, judged):
    """Eq. 7: log P(a | q, d_i), the sum of the pseudo-answer's token log-probabilities after the
    one-passage answer prompt, and the ranking is by it, highest first."""
    tiny = tiny_job_model
    questions = {q: text for q, text, _, _ in JOB_QUERIES}
    for (qid,), part in judged["likelihood"].sort("rank").group_by("qid", maintain_order=True):
        for pid, score in part.select("pid", "score").iter_rows():
            prompt_ids = tiny.encode(_answer_prompt_written_out(questions[qid], [pid]))
            answer_ids = tiny.tokenizer(JOB_PSEUDO[qid], add_special_tokens=False)["input_ids"]
            assert score == pytest.approx(sum(direct_target_logprobs(tiny.model, prompt_ids, answer_ids)), abs=1e-4)
        assert part["score"].to_list() == sorted(part["score"].to_list(), reverse=True)


@functools.lru_cache(maxsize=4)
def _eager_copy(load_path: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(load_path, attn_implementation="eager", dtype=torch.float32)


def eq6_written_out(
    load_path: str, prompt: str, passages: list[str], answer: str, tokenizer, prompt_ids: list[int]
) -> list[float]:
    """Eq. 6 from ``output_attentions=True`` of an eager copy of the model: for decoding step t (the
    position that produces answer token t), the attention mass on each passage's tokens, averaged
    over heads and layers, then over steps, then normalized across passages."""
    model = _eager_copy(load_path)
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    offset = len(prompt_ids) - len(tokenizer(prompt, add_special_tokens=False)["input_ids"])  # a BOS before the text
    offsets = tokenizer(prompt, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    token_sets, start = [], 0
    for text in passages:
        lo = prompt.index(text, start)
        hi = start = lo + len(text)
        token_sets.append([offset + i for i, (a, b) in enumerate(offsets) if b > a and a < hi and b > lo])
    with torch.inference_mode():
        attentions = model(torch.tensor([prompt_ids + answer_ids[:-1]]), output_attentions=True).attentions
    steps = range(len(prompt_ids) - 1, len(prompt_ids) + max(len(answer_ids), 1) - 1)
    raw = []
    for tokens in token_sets:
        per_step = [
            float(torch.stack([layer[0, :, t, tokens].sum(-1).mean() for layer in attentions]).mean()) for t in steps
        ]
        raw.append(sum(per_step) / len(per_step))
    return [r / sum(raw) for r in raw]


def test_attention_ranking_is_eq6_written_out(tiny_job_model, judged):
    tiny = tiny_job_model
    questions = {q: text for q, text, _, _ in JOB_QUERIES}
    for (qid,), part in judged["attention"].group_by("qid", maintain_order=True):
        pool = JOB_RUN[qid]
        prompt = _answer_prompt_written_out(questions[qid], pool)
        texts = [f"{JOB_PASSAGES[p][0]} {JOB_PASSAGES[p][1]}" for p in pool]
        expected = dict(
            zip(
                pool,
                eq6_written_out(tiny.load_path, prompt, texts, JOB_PSEUDO[qid], tiny.tokenizer, tiny.encode(prompt)),
            )
        )
        got = dict(part.select("pid", "score").iter_rows())
        assert got == pytest.approx(expected, abs=1e-5)
        assert sum(got.values()) == pytest.approx(1.0)


# --- answers' correctness: has_answer with DPR's semantics, written out ---------------------------

# DPR's SimpleTokenizer (dpr/utils/tokenizers.py): a token is a run of letters, digits and marks, or
# any single character that is neither a separator nor a control character.
DPR_TOKEN = regex.compile(
    r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE
)


def dpr_has_answer(text: str, answers: list[str]) -> bool:
    """DPR's has_answer (dpr/data/qa_validation.py, match_type "string"): NFD on both sides, the
    tokens above, uncased, an answer's tokens contiguous in the text's. An answer without tokens
    never matches (DPR's loop would match it at position 0)."""
    words = [m.group().lower() for m in DPR_TOKEN.finditer(unicodedata.normalize("NFD", text))]
    for answer in answers:
        tokens = [m.group().lower() for m in DPR_TOKEN.finditer(unicodedata.normalize("NFD", answer))]
        if tokens and any(words[i : i + len(tokens)] == tokens for i in range(len(words) - len(tokens) + 1)):
            return True
    return False


def stated_verdict_correct(text: str, gold: list[str]) -> bool:
    """A claim is answered correctly when exactly one of SUPPORTS / REFUTES occurs as a word, and it
    is the gold label (no synonyms configured)."""
    words = {m.group().lower() for m in DPR_TOKEN.finditer(unicodedata.normalize("NFD", text))}
    stated = {label for label in ("SUPPORTS", "REFUTES") if label.lower() in words}
    return len(stated) == 1 and stated <= {g.upper() for g in gold}


def _has_word(text: str) -> bool:
    return any(m.group(1) for m in DPR_TOKEN.finditer(unicodedata.normalize("NFD", text)))


# Letters with and without accents (precomposed and combining), digits, punctuation, spaces, a CJK
# character and a control character: where tokenizers disagree when one is wrong.
ALPHABET = "abcAB São ñ\u0303e\u0301 1 2 , . - ' ( ) 中 \t\n"


def test_has_answer_is_dprs_on_generated_texts():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from llm_utility.metrics import has_answer

    text_st = st.text(alphabet=ALPHABET, max_size=40)

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(text=text_st, answers=st.lists(text_st, max_size=3), start=st.integers(0, 40), size=st.integers(0, 12))
    def check(text, answers, start, size):
        answers = [*answers, text[start : start + size]]  # a piece of the text: matches happen
        # The project goes one step further than DPR: an answer of punctuation only never matches.
        answers = [a for a in answers if _has_word(a) or not DPR_TOKEN.search(unicodedata.normalize("NFD", a))]
        assert has_answer(text, answers) == dpr_has_answer(text, answers)

    check()


@pytest.mark.parametrize(
    "text, answers, expected",
    [
        ("The capital is Brasília.", [unicodedata.normalize("NFD", "Brasília")], True),  # NFC text, NFD answer
        ("The capital is Brasilia.", ["Brasília"], False),  # marks are part of the word: no accent folding
        ("SÃO PAULO!", ["são paulo"], True),  # uncased
        ("New York-based", ["York-based"], True),  # "-" is a token of its own on both sides
        ("Yorkshire", ["York"], False),  # whole tokens only
        ("anything at all", ["", "  "], False),  # an empty answer never matches
        ("a b c", ["b  c"], True),
    ],
)
def test_has_answer_cases(text, answers, expected):
    from llm_utility.metrics import has_answer

    assert dpr_has_answer(text, answers) is expected
    assert has_answer(text, answers) is expected


def test_punctuation_only_answers_never_match():
    """The project's documented step beyond DPR: an answer with no word token (a lone ".") never
    matches, where DPR's rule would match any sentence."""
    from llm_utility.metrics import has_answer

    assert dpr_has_answer("It is Lima.", ["."]) and not has_answer("It is Lima.", ["."])


# --- what the answer, gold and Table 1 jobs report ------------------------------------------------

ANS_QUERIES = [
    # qid, question, answers, human pids, task
    ("q1", "What is the capital of Peru?", ["Lima", ""], ["h1"], "qa"),
    ("q2", "What is the capital of Brazil?", [unicodedata.normalize("NFD", "Brasília")], ["p5"], "qa"),
    ("q3", "Santiago is the capital of which country?", ["Santiago"], ["p2"], "qa"),  # known: the question names it
    ("q4", "Lima is the capital of Peru.", ["SUPPORTS"], ["p1"], "fact"),
    ("q5", "What is the capital of Chile?", ["Santiago, Chile", "Santiago"], [], "qa"),
]
ANS_PASSAGES = {
    "p1": ("Peru", "Lima is the capital of Peru."),
    "p2": ("Chile", "Santiago is the capital of Chile."),
    "p3": ("Peru economy", "Peru uses the sol."),
    "p4": ("Andes", "The Andes run through Peru and Chile."),
    "p5": ("Brazil", "Brasília is the capital of Brazil."),
    "h1": ("Lima", "Lima lies on the coast; Lima is the capital of Peru."),
}
ANS_RUN = {
    "q1": ["p3", "p1", "p4"],
    "q2": ["p4", "p5", "p3"],
    "q3": ["p2", "p4", "p1"],
    "q4": ["p3", "p4", "p1"],
    "q5": ["p1", "p2", "p4"],
}


def _rambler():
    """A stand-in model (tests/standin.py) whose answers are sentences with punctuation: the first
    capital a prompt names, else a guess; claims get one verdict, or an echo of both labels."""
    from standin import StandInGenerator

    class Rambler(StandInGenerator):
        def _answer(self, prompt: str) -> str:
            found = regex.search(r"(\p{Lu}\p{Ll}+) is the capital of", prompt)
            if "Claim:" in prompt:
                return "SUPPORTS." if found and "Information:" in prompt else "SUPPORTS or REFUTES?"
            return f"I think it is {found.group(1)}!" if found else "Maybe Quito, or Sucre."

    return Rambler


@pytest.fixture(scope="module")
def answered(tmp_path_factory):
    """The answer jobs (none, single, topk, union, human; then G(C), G(U)), the gold job and the
    Table 1 job of one stand-in LLM on the files above; returns the paths."""
    import polars as pl

    import llm_utility.generation as generation
    from llm_utility import pipeline
    from llm_utility.config import with_defaults
    from standin import stand_in_manifest, write_tiny_model

    tmp = tmp_path_factory.mktemp("answers")
    model_dir = write_tiny_model(tmp / "model")
    manifest = tmp / "manifest.json"
    manifest.write_text(json.dumps(stand_in_manifest(model_dir, "rambler")))
    mp = pytest.MonkeyPatch()
    rambler = _rambler()
    mp.setattr(
        generation, "load_generator", lambda m, spec, threads=None: rambler(json.loads(Path(m).read_text()), spec)
    )
    pl.DataFrame(
        ANS_QUERIES,
        schema={
            "qid": pl.String,
            "question": pl.String,
            "answers": pl.List(pl.String),
            "human_pids": pl.List(pl.String),
            "task": pl.String,
        },
        orient="row",
    ).write_parquet(tmp / "queries.parquet")
    pl.DataFrame(
        [(p, t, x) for p, (t, x) in ANS_PASSAGES.items()], schema=["pid", "title", "text"], orient="row"
    ).write_parquet(tmp / "passages.parquet")
    run = [(q, p, r, 1.0 / r) for q, ps in ANS_RUN.items() for r, p in enumerate(ps, 1)]
    pl.DataFrame(
        run, schema={"qid": pl.String, "pid": pl.String, "rank": pl.Int32, "score": pl.Float32}, orient="row"
    ).write_parquet(tmp / "run.parquet")
    paths = {
        name: str(tmp / f"{name}.parquet")
        for name in ("queries", "candidates", "none", "single", "topk", "union", "human", "gold_C", "gold_U", "known")
    }
    pipeline.candidates_job(
        queries=paths["queries"],
        run=str(tmp / "run.parquet"),
        passages=str(tmp / "passages.parquet"),
        top_k=3,
        output=paths["candidates"],
    )
    common = {
        "dataset": "d",
        "queries": paths["queries"],
        "candidates": paths["candidates"],
        "manifest": str(manifest),
        "prompts": str(REPO / "config" / "prompts.yaml"),
        "store": str(tmp / "store"),
        "spec": with_defaults(
            "llms",
            {
                "backend": "transformers",
                "weights": {"path": str(model_dir)},
                "prompt_format": "completion",
                "stop": ["\n"],
            },
        ),
    }
    pipeline.answer_job(
        **common, tables={}, outputs={c: paths[c] for c in ("none", "single", "topk", "union", "human")}, job="a"
    )
    pipeline.gold_job(
        candidates=paths["candidates"],
        none=paths["none"],
        single=paths["single"],
        outputs={k: paths[k] for k in ("gold_C", "gold_U", "known")},
    )
    transfer = {f"gold_{c}_from_rambler": paths[f"gold_{c}"] for c in "CU"}
    paths |= {ctx: str(tmp / f"{ctx}.parquet") for ctx in transfer}
    pipeline.answer_job(**common, tables=transfer, outputs={ctx: paths[ctx] for ctx in transfer}, job="g")
    contexts = ("none", "topk", "union", "human", *transfer)
    pipeline.table1_job(
        answers={("d", "rambler", c): paths[c] for c in contexts},
        gold={("d", "rambler", c): paths[f"gold_{c}"] for c in "CU"},
        queries={"d": paths["queries"]},
        csv=str(tmp / "t1.csv"),
        md=str(tmp / "t1.md"),
        tex=str(tmp / "t1.tex"),
    )
    paths["table1"] = str(tmp / "t1.csv")
    yield paths
    mp.undo()


def _correct_written_out(output: str, qid: str) -> bool:
    _, _, answers, _, task = next(q for q in ANS_QUERIES if q[0] == qid)
    return dpr_has_answer(output, answers) if task == "qa" else stated_verdict_correct(output, answers)


def test_every_answer_row_is_scored_by_the_written_out_rule(answered):
    import polars as pl

    seen = set()
    for context in ("none", "single", "topk", "union", "human", "gold_C_from_rambler", "gold_U_from_rambler"):
        for qid, pids, output, correct in (
            pl.read_parquet(answered[context]).select("qid", "pids", "output", "correct").iter_rows()
        ):
            assert correct == _correct_written_out(output, qid), (context, qid, output)
            seen.add((output, correct))
    # The fixture is not trivial: right and wrong answers, sentences, claims echoing both labels.
    assert {c for _, c in seen} == {True, False} and ("SUPPORTS or REFUTES?", False) in seen


def test_gold_sets_and_known_flags_are_eq_1_and_2(answered):
    """u_i = 1 iff correct(q, d_i) > correct(q, no passage), over C (top-k) and U (C and the human
    passages); known iff correct with no passage. Recomputed from the outputs, not the jobs' flags."""
    import polars as pl

    none = {
        q: _correct_written_out(o, q) for q, o in pl.read_parquet(answered["none"]).select("qid", "output").iter_rows()
    }
    single = {
        (q, pids[0]): _correct_written_out(o, q)
        for q, pids, o in pl.read_parquet(answered["single"]).select("qid", "pids", "output").iter_rows()
    }
    pools = {"C": {q: ANS_RUN[q] for q in ANS_RUN}}
    pools["U"] = {q: ANS_RUN[q] + [h for h in human if h not in ANS_RUN[q]] for q, _, _, human, _ in ANS_QUERIES}
    for cand, pool in pools.items():
        expected = {(q, p) for q, pids in pool.items() for p in pids if single[(q, p)] > none[q]}
        assert set(pl.read_parquet(answered[f"gold_{cand}"]).select("qid", "pid").iter_rows()) == expected
    assert dict(pl.read_parquet(answered["known"]).select("qid", "known").iter_rows()) == none
    assert any(none.values()) and not all(none.values())  # known and unknown queries both occur
    gold_u = set(pl.read_parquet(answered["gold_U"]).select("qid", "pid").iter_rows())
    assert ("q1", "h1") in gold_u and ("q1", "h1") not in set(
        pl.read_parquet(answered["gold_C"]).select("qid", "pid").iter_rows()
    )


def test_table1_is_the_share_of_correct_outputs(answered):
    import polars as pl

    table = pl.read_csv(answered["table1"])
    contexts = {
        "None": "none",
        "C": "topk",
        "U": "union",
        "Human": "human",
        "G(C)": "gold_C_from_rambler",
        "G(U)": "gold_U_from_rambler",
    }
    for column, context in contexts.items():
        rows = pl.read_parquet(answered[context]).select("qid", "output").rows()
        assert sorted(q for q, _ in rows) == sorted(q for q, *_ in ANS_QUERIES)  # every query, once
        expected = 100 * sum(_correct_written_out(o, q) for q, o in rows) / len(rows)
        assert table.filter(pl.col("column") == column)["correct"].item() == pytest.approx(expected)
    for cand in "CU":
        gold = pl.read_parquet(answered[f"gold_{cand}"])
        assert table.filter(pl.col("column") == f"G({cand})")["avg_size"].item() == pytest.approx(
            gold.height / len(ANS_QUERIES)
        )
    human = sum(len(h) for _, _, _, h, _ in ANS_QUERIES) / len(ANS_QUERIES)
    assert table.filter(pl.col("column") == "Human")["avg_size"].item() == pytest.approx(human)


# --- set metrics: the paper's formulas, written out -----------------------------------------------


def _random_judgments(seed: int, n_queries: int = 40, k: int = 6):
    """Random listwise judgments over k candidates: gold sets (a third empty), selections, and a
    tenth of the outputs unparsed (nothing selected). Returns (judgments table, gold table, truth),
    truth: qid -> (gold set, selected set, parsed)."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    rows, gold_rows, truth = [], [], {}
    for i in range(n_queries):
        qid, pool = f"q{i:02d}", [f"p{j}" for j in range(k)]
        gold = set() if rng.random() < 1 / 3 else {p for p in pool if rng.random() < 0.3} or {pool[0]}
        parsed = bool(rng.random() > 0.1)
        selected = {p for p in pool if rng.random() < 0.35} if parsed else set()
        truth[qid] = (gold, selected, parsed)
        rows += [(qid, p, p in selected, parsed, "raw") for p in pool]
        gold_rows += [(qid, p) for p in sorted(gold)]
    judgments = pl.DataFrame(
        rows,
        schema={"qid": pl.String, "pid": pl.String, "selected": pl.Boolean, "parsed": pl.Boolean, "output": pl.String},
        orient="row",
    )
    return judgments, pl.DataFrame(gold_rows, schema={"qid": pl.String, "pid": pl.String}, orient="row"), truth


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_selection_table_is_the_papers_formulas(seed):
    """Table 2's P, R, F1 (harmonic mean of the averaged P and R), per-query F1, Acc on empty gold
    (an unparsed output is never a rejection), set sizes and unparsed shares."""
    from statistics import mean

    from llm_utility.report.judgments import selection_scores

    judgments, gold, truth = _random_judgments(seed)
    [row] = selection_scores({("d", "m", "listwise"): judgments}, {("d", "m"): gold}).to_dicts()
    nonempty = {q: t for q, t in truth.items() if t[0]}
    empty = {q: t for q, t in truth.items() if not t[0]}
    precision = mean(len(g & s) / len(s) if s else 0.0 for g, s, _ in nonempty.values())
    recall = mean(len(g & s) / len(g) for g, s, _ in nonempty.values())
    per_query_f1 = mean(
        2 * (len(g & s) / len(s)) * (len(g & s) / len(g)) / ((len(g & s) / len(s)) + (len(g & s) / len(g)))
        if g & s
        else 0.0
        for g, s, _ in nonempty.values()
    )
    assert row["precision"] == pytest.approx(100 * precision)
    assert row["recall"] == pytest.approx(100 * recall)
    assert row["f1"] == pytest.approx(100 * 2 * precision * recall / (precision + recall))
    assert row["f1_per_query"] == pytest.approx(100 * per_query_f1)
    assert row["accuracy_empty"] == pytest.approx(100 * mean(not s and ok for _, s, ok in empty.values()))
    assert row["avg_selected_nonempty"] == pytest.approx(mean(len(s) for _, s, _ in nonempty.values()))
    assert row["avg_selected_empty"] == pytest.approx(mean(len(s) for _, s, _ in empty.values()))
    assert row["unparsed_empty"] == pytest.approx(100 * mean(not ok for *_, ok in empty.values()))
    assert row["unparsed_nonempty"] == pytest.approx(100 * mean(not ok for *_, ok in nonempty.values()))
    assert (row["n_nonempty"], row["n_empty"]) == (len(nonempty), len(empty))


# --- ranking metrics: trec_eval, called directly, and the formulas written out -------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_ranking_table_is_trec_eval(seed):
    import math

    import numpy as np
    import polars as pl
    import pytrec_eval

    from llm_utility.report.judgments import ranking_scores

    rng = np.random.default_rng(seed)
    k, rows, gold_rows, rankings, gold = 5, [], [], {}, {}
    for i in range(30):
        qid, pool = f"q{i:02d}", [f"p{j:02d}" for j in range(12)]
        order = [pool[j] for j in rng.permutation(len(pool))]
        relevant = set() if i % 4 == 0 else {p for p in pool if rng.random() < 0.25} or {pool[3]}
        rankings[qid], gold[qid] = order, relevant
        rows += [(qid, p, r, float(len(pool) - r + 1), True) for r, p in enumerate(order, 1)]
        gold_rows += [(qid, p) for p in sorted(relevant)]
    table = pl.DataFrame(
        rows,
        schema={"qid": pl.String, "pid": pl.String, "rank": pl.Int32, "score": pl.Float64, "parsed": pl.Boolean},
        orient="row",
    )
    gold_table = pl.DataFrame(gold_rows, schema={"qid": pl.String, "pid": pl.String}, orient="row")
    [row] = ranking_scores(
        {("d", "m", "likelihood"): table.sample(fraction=1.0, shuffle=True, seed=seed)}, {("d", "m"): gold_table}, k
    ).to_dicts()

    judged = [q for q in rankings if gold[q]]  # queries with a non-empty gold set
    qrels = {q: {p: 1 for p in gold[q]} for q in judged}
    run = {q: {p: float(len(rankings[q]) - r) for r, p in enumerate(rankings[q])} for q in judged}
    measures = pytrec_eval.RelevanceEvaluator(qrels, {f"ndcg_cut_{k}", f"recall_{k}"}).evaluate(run)
    assert row["ndcg"] == pytest.approx(100 * sum(m[f"ndcg_cut_{k}"] for m in measures.values()) / len(judged))
    assert row["recall"] == pytest.approx(100 * sum(m[f"recall_{k}"] for m in measures.values()) / len(judged))

    def ndcg(order, relevant):
        dcg = sum(1 / math.log2(r + 2) for r, p in enumerate(order[:k]) if p in relevant)
        return dcg / sum(1 / math.log2(r + 2) for r in range(min(k, len(relevant))))

    assert row["ndcg"] == pytest.approx(100 * sum(ndcg(rankings[q], gold[q]) for q in judged) / len(judged))
    assert row["recall"] == pytest.approx(
        100 * sum(len(set(rankings[q][:k]) & gold[q]) / len(gold[q]) for q in judged) / len(judged)
    )


# --- bootstrap intervals: scipy called directly, and a percentile bootstrap written out -----------


def test_selection_f1_interval_is_scipys_paired_bootstrap():
    """The F1 cell's interval: queries (each with its P and R) resampled together, F1 of the
    averages recomputed per resample, BCa, the seed as scipy's rng: scipy.stats.bootstrap directly."""
    import numpy as np
    from scipy import stats

    from llm_utility.report.judgments import selection_intervals

    judgments, gold, truth = _random_judgments(7, n_queries=60)
    [row] = selection_intervals(
        {("d", "m", "listwise"): judgments}, {("d", "m"): gold}, n_resamples=3000, seed=11
    ).to_dicts()
    nonempty = [t for t in truth.values() if t[0]]
    # Shares first, then percent, as the table computes them: BCa counts the resamples below the
    # point estimate, and a last-digit difference in a tied value moves that count.
    p = 100 * np.array([len(g & s) / len(s) if s else 0.0 for g, s, _ in nonempty])
    r = 100 * np.array([len(g & s) / len(g) for g, s, _ in nonempty])

    def f1(p, r, axis=-1):
        mp, mr = np.mean(p, axis=axis), np.mean(r, axis=axis)
        return 2 * mp * mr / (mp + mr)

    expected = stats.bootstrap(
        (p, r),
        f1,
        paired=True,
        vectorized=True,
        n_resamples=3000,
        confidence_level=0.95,
        method="BCa",
        rng=np.random.default_rng(11),
    ).confidence_interval
    assert (row["f1_lo"], row["f1_hi"]) == pytest.approx((expected.low, expected.high), rel=1e-9)
    empty = np.array([100.0 * (not s and ok) for g, s, ok in truth.values() if not g])
    acc = stats.bootstrap(
        (empty,), np.mean, vectorized=True, n_resamples=3000, method="BCa", rng=np.random.default_rng(11)
    ).confidence_interval
    assert (row["accuracy_empty_lo"], row["accuracy_empty_hi"]) == pytest.approx((acc.low, acc.high), rel=1e-9)


def test_mean_interval_agrees_with_a_written_out_percentile_bootstrap():
    import numpy as np

    from llm_utility.report.bootstrap import mean_interval

    x = np.random.default_rng(3).exponential(10.0, size=80)  # skewed, as per-query values often are
    n_resamples = 20_000
    got = mean_interval(x, n_resamples=n_resamples, seed=5, method="percentile")
    means = x[np.random.default_rng(123).integers(0, len(x), (n_resamples, len(x)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    assert got.effect == pytest.approx(x.mean())
    # Different draws: the endpoints agree within Monte Carlo error, a few percent of the width.
    assert abs(got.lo - lo) < 0.05 * (hi - lo) and abs(got.hi - hi) < 0.05 * (hi - lo)
    assert lo < x.mean() < hi
