"""How long the paper setup's prompts are, in a model's own tokens: the basis of `max_model_len`.

Renders, with the workflow's own prompt code and config/prompts.yaml, every kind of prompt the paper
run sends, for top-k candidates of a given passage length, through a model's tokenizer and chat
template, and prints their token counts and the longest prompt plus the largest output cap:

    .venv/bin/python benchmarks/prompt_tokens.py --tokenizer resources/models/smollm2-135m
    python benchmarks/prompt_tokens.py --tokenizer resources/models/qwen3-32b --thinking   # on a cluster

Passages are real encyclopedic text (the demo's worldfacts sections: countries' capitals,
populations, languages) cut to exactly ``--words`` words, each with its title, as DPR's 100-word
Wikipedia passages are; the question is a typical NQ-length one and the pseudo-answer a short one.
Output caps come from the config (``--config``): the answer's `max_new_tokens`, the judgments'
`listwise_max_new_tokens` and the rankings' `max_new_tokens`, and with ``--thinking`` the thinking
budget (Table 5's methods: one model, NQ). One JSON line per prompt kind, then a summary line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

QUESTION = "who sang the song that won the eurovision song contest in 1974"
PSEUDO_ANSWER = "ABBA"


def passages(k: int, words: int):
    """``k`` passages of exactly ``words`` words of worldfacts text, titled."""
    from llm_utility.data.worldfacts import build_corpus
    from llm_utility.method.prompts import Passage

    corpus = build_corpus(seed=0, n_cities=0)
    pool = " ".join(corpus["text"].to_list()).split()
    titles = corpus["title"].to_list()
    return [Passage(f"p{i}", titles[i % len(titles)], " ".join(pool[i * words : (i + 1) * words])) for i in range(k)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="a model folder with the tokenizer (and its chat template)")
    parser.add_argument("--config", default=str(REPO / "config" / "paper.yaml"))
    parser.add_argument("--k", type=int, default=None, help="candidates per query (default: the config's top_k)")
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--thinking", action="store_true", help="include the thinking budget in the output caps")
    args = parser.parse_args()

    import yaml

    from llm_utility.config import with_defaults
    from llm_utility.generation import load_generator
    from llm_utility.method.judgments import (
        SELECTION_METHODS,
        VERBAL_RANKING_METHODS,
        listwise_messages,
        pointwise_prompt,
        render_judgment,
    )
    from llm_utility.method.prompts import answer_prompt, load_prompts

    config = yaml.safe_load(Path(args.config).read_text())
    prompts = load_prompts(REPO / config.get("prompts", "config/prompts.yaml"))
    k = args.k or config.get("top_k", 20)
    cands = passages(k, args.words)
    manifest = {
        "slug": Path(args.tokenizer).name,
        "backend": "transformers",
        "load_path": args.tokenizer,
        "fingerprint": "-",
    }
    gen = load_generator(
        manifest, {"backend": "transformers", "weights": {"path": args.tokenizer}, "prompt_format": "chat"}
    )

    rendered = {
        "answer, no passage": gen.render(answer_prompt(prompts, "qa", QUESTION, [])),
        "answer, one passage": gen.render(answer_prompt(prompts, "qa", QUESTION, cands[:1])),
        f"answer, top-{k} (also the attention pass)": gen.render(answer_prompt(prompts, "qa", QUESTION, cands)),
        "pointwise judgment with pseudo-answer": render_judgment(
            prompts,
            SELECTION_METHODS["pointwise_pa"],
            gen,
            pointwise_prompt(prompts, SELECTION_METHODS["pointwise_pa"], QUESTION, cands[0], PSEUDO_ANSWER),
        ),
    }
    for name, method in (
        ("listwise_pa_reject", SELECTION_METHODS["listwise_pa_reject"]),
        ("ranking listwise_pa", VERBAL_RANKING_METHODS["listwise_pa"]),
    ):
        messages = listwise_messages(prompts, method, QUESTION, cands, PSEUDO_ANSWER)
        rendered[f"{name}, {k} passages"] = render_judgment(prompts, method, gen, messages)

    judgments, rankings = (
        with_defaults("judgments", config.get("judgments", {})),
        with_defaults("rankings", config.get("rankings", {})),
    )
    answer_cap = max(with_defaults("llms", spec)["max_new_tokens"] for spec in config["llms"].values())
    caps = {
        "answer": answer_cap,
        "listwise judgment": judgments["listwise_max_new_tokens"],
        "listwise ranking": rankings["max_new_tokens"],
    }
    if args.thinking:
        caps["thinking"] = judgments["thinking_max_new_tokens"]
    counts = dict(zip(rendered, gen.count_tokens(list(rendered.values()))))
    for name, n in counts.items():
        print(json.dumps({"prompt": name, "tokens": n}))
    longest = max(counts.values())
    print(
        json.dumps(
            {
                "tokenizer": args.tokenizer,
                "k": k,
                "words_per_passage": args.words,
                "passage_tokens": gen.count_tokens([f"{p.title} {p.text}" for p in cands], special=False),
                "longest_prompt": longest,
                "output_caps": caps,
                "longest_prompt_plus_largest_cap": longest + max(caps.values()),
            }
        )
    )


if __name__ == "__main__":
    main()
