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

import json
import math
from pathlib import Path

import pytest
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
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([WORDS], trainer)
    if adds:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token="</s>", pad_token="<pad>")
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.5,
        bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"), pad_token_id=0,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    manifest = {"slug": f"tiny-{kind}", "backend": "transformers", "load_path": str(path), "fingerprint": f"tiny:{kind}:{seed}"}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def tiny_spec(path: Path, batch_size: int = 8) -> dict:
    return {"backend": "transformers", "weights": {"path": str(path)}, "prompt_format": "completion", "batch_size": batch_size, "stop": ["\n"]}


@pytest.fixture(scope="module", params=sorted(BOS_KINDS))
def tiny(request, tmp_path_factory):
    from llm_utility.generation import load_generator

    path = tmp_path_factory.mktemp(f"tiny-{request.param}")
    manifest = write_tiny_llama(path, request.param)
    gen = load_generator(manifest, tiny_spec(path))
    gen.kind = request.param
    return gen


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
    ("Information: Oslo lies on the coast of Norway. Lima is the capital of Peru. Question: What is the capital of Peru? Answer:", " Lima"),
    ("", "Question: What is the capital of Chile? Santiago is the capital of Chile."),  # the query+passage shape
]


def test_score_matches_a_direct_unbatched_computation_for_every_prompt_shape(tiny):
    """One left-padded batch of mixed prompt and target lengths (empty prompts among long ones) and
    every pair on its own agree with the direct computation."""
    prompts = [tiny.encode(p) for p, _ in SHAPES]
    assert len({len(p) + len(tiny.tokenizer(t, add_special_tokens=False)["input_ids"]) for (_, t), p in zip(SHAPES, prompts)}) >= 5
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
    from llm_utility.method.rankings import perplexity

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
            entries = [None] + [{ids[i]: types.SimpleNamespace(logprob=float(logprobs[i - 1, ids[i]]))} for i in range(1, len(ids))]
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
        expected = direct_target_logprobs(tiny.model, tiny.encode(prompt), tiny.tokenizer(target, add_special_tokens=False)["input_ids"])
        assert got == pytest.approx(expected, abs=1e-5)


# --- the demo models (slow tier) -----------------------------------------------------------------


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def demo_model(request):
    """A demo model as the demo config specifies it, from resources/models (materialized there once)."""
    import yaml

    from llm_utility.generation import load_generator, materialize

    spec = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["llms"][request.param]
    manifest = materialize(request.param, spec, REPO / "resources" / "models" / request.param)
    return load_generator(manifest, spec)


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
        expected = direct_target_logprobs(gen.model, prompt_ids, gen.tokenizer(target, add_special_tokens=False)["input_ids"])
        assert got == pytest.approx(expected, abs=5e-4)
    from llm_utility.method.rankings import perplexity

    for text, logprobs in zip([passage, f"{question} {passage}"], batched):
        direct = direct_perplexity(gen.model, gen.tokenizer, text)
        print(f"\n{gen.slug}: perplexity {perplexity(logprobs):.2f}, transformers' loss gives {direct:.2f}: {text[:40]!r}")
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


@pytest.fixture(scope="module")
def judged(tiny, tmp_path_factory):
    """One judge job of the tiny model (likelihood and attention rankings, perplexities) on files
    written here; returns its output tables."""
    import polars as pl

    from llm_utility import pipeline
    from llm_utility.workflow import with_defaults

    tmp = tmp_path_factory.mktemp(f"judge-{tiny.kind}")
    queries = pl.DataFrame(
        [(q, text, ans, human, "qa") for q, text, ans, human in JOB_QUERIES],
        schema={"qid": pl.String, "question": pl.String, "answers": pl.List(pl.String), "human_pids": pl.List(pl.String), "task": pl.String},
        orient="row",
    )
    queries.write_parquet(tmp / "queries.parquet")
    pl.DataFrame([(p, t, x) for p, (t, x) in JOB_PASSAGES.items()], schema=["pid", "title", "text"], orient="row").write_parquet(tmp / "passages.parquet")
    run = [(q, p, r, 1.0 / r) for q, ps in JOB_RUN.items() for r, p in enumerate(ps, 1)]
    pl.DataFrame(run, schema={"qid": pl.String, "pid": pl.String, "rank": pl.Int32, "score": pl.Float32}, orient="row").write_parquet(tmp / "run.parquet")
    pl.DataFrame(JOB_GOLD_U, schema=["qid", "pid"], orient="row").write_parquet(tmp / "gold_U.parquet")
    pl.DataFrame(list(JOB_PSEUDO.items()), schema=["qid", "output"], orient="row").write_parquet(tmp / "topk.parquet")
    pipeline.candidates_job(queries=str(tmp / "queries.parquet"), run=str(tmp / "run.parquet"), passages=str(tmp / "passages.parquet"), top_k=3, output=str(tmp / "candidates.parquet"))
    rankings = {m: str(tmp / f"{m}.parquet") for m in ("likelihood", "attention")}
    pipeline.judge_job(
        dataset="tiny", queries=str(tmp / "queries.parquet"), candidates=str(tmp / "candidates.parquet"),
        manifest=str(Path(tiny.load_path) / "manifest.json"), prompts=str(REPO / "config" / "prompts.yaml"),
        spec=with_defaults("llms", tiny_spec(Path(tiny.load_path), batch_size=3)), store=str(tmp / "store"), job="judge",
        judgments={}, rankings=rankings, perplexity=str(tmp / "perplexity.parquet"), gold_U=str(tmp / "gold_U.parquet"),
        pseudo_answers={"topk": str(tmp / "topk.parquet")}, max_new_tokens={}, rankings_cfg=with_defaults("rankings", {}),
    )
    return {name: pl.read_parquet(path) for name, path in {**rankings, "perplexity": str(tmp / "perplexity.parquet")}.items()}


def _answer_prompt_written_out(question: str, pids: list[str]) -> str:
    import yaml

    wording = yaml.safe_load((REPO / "config" / "prompts.yaml").read_text())["answer"]["qa"]["with_passages"]
    return wording.format(question=question, passages="\n".join(f"{JOB_PASSAGES[p][0]} {JOB_PASSAGES[p][1]}" for p in pids))


def test_perplexity_rows_are_transformers_own_loss(tiny, judged):
    table = judged["perplexity"].sort("qid", "pid")
    questions = {q: text for q, text, _, _ in JOB_QUERIES}
    assert table.select("qid", "pid", "in_gold").rows() == [("q1", "h1", True), ("q1", "p2", False), ("q2", "h2", False)]
    for qid, pid, _, ppl_passage, ppl_query_passage in table.iter_rows():
        title, text = JOB_PASSAGES[pid]
        assert ppl_passage == pytest.approx(direct_perplexity(tiny.model, tiny.tokenizer, f"{title} {text}"), rel=1e-4)
        assert ppl_query_passage == pytest.approx(direct_perplexity(tiny.model, tiny.tokenizer, f"{questions[qid]} {title} {text}"), rel=1e-4)


def test_likelihood_ranking_is_the_log_probability_of_the_pseudo_answer(tiny, judged):
    """Eq. 7: log P(a | q, d_i), the sum of the pseudo-answer's token log-probabilities after the
    one-passage answer prompt, and the ranking is by it, highest first."""
    questions = {q: text for q, text, _, _ in JOB_QUERIES}
    for (qid,), part in judged["likelihood"].sort("rank").group_by("qid", maintain_order=True):
        for pid, score in part.select("pid", "score").iter_rows():
            prompt_ids = tiny.encode(_answer_prompt_written_out(questions[qid], [pid]))
            answer_ids = tiny.tokenizer(JOB_PSEUDO[qid], add_special_tokens=False)["input_ids"]
            assert score == pytest.approx(sum(direct_target_logprobs(tiny.model, prompt_ids, answer_ids)), abs=1e-4)
        assert part["score"].to_list() == sorted(part["score"].to_list(), reverse=True)


def eq6_written_out(load_path: str, prompt: str, passages: list[str], answer: str, tokenizer, prompt_ids: list[int]) -> list[float]:
    """Eq. 6 from ``output_attentions=True`` of an eager copy of the model: for decoding step t (the
    position that produces answer token t), the attention mass on each passage's tokens, averaged
    over heads and layers, then over steps, then normalized across passages."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(load_path, attn_implementation="eager", dtype=torch.float32)
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
        per_step = [float(torch.stack([layer[0, :, t, tokens].sum(-1).mean() for layer in attentions]).mean()) for t in steps]
        raw.append(sum(per_step) / len(per_step))
    return [r / sum(raw) for r in raw]


def test_attention_ranking_is_eq6_written_out(tiny, judged):
    questions = {q: text for q, text, _, _ in JOB_QUERIES}
    for (qid,), part in judged["attention"].group_by("qid", maintain_order=True):
        pool = JOB_RUN[qid]
        prompt = _answer_prompt_written_out(questions[qid], pool)
        texts = [f"{JOB_PASSAGES[p][0]} {JOB_PASSAGES[p][1]}" for p in pool]
        expected = dict(zip(pool, eq6_written_out(tiny.load_path, prompt, texts, JOB_PSEUDO[qid], tiny.tokenizer, tiny.encode(prompt))))
        got = dict(part.select("pid", "score").iter_rows())
        assert got == pytest.approx(expected, abs=1e-5)
        assert sum(got.values()) == pytest.approx(1.0)
