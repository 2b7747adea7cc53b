"""The workflow lints and formats clean, and a bad config stops the dry-run with a message naming
the key."""

import subprocess
from pathlib import Path

import pytest

from workflow_runner import REPO, snakemake_cmd


@pytest.mark.slow
def test_lint_clean(repo):
    out = subprocess.run(snakemake_cmd("--lint"), cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Congratulations" in out.stdout + out.stderr, out.stdout + out.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("retriever: minilm", "retriever: nosuch", "datasets.wf-single.retriever = 'nosuch' is not in retrievers"),
        (
            "\nfigures:",
            "\nreport:\n  figure1_dataset: nq\nfigures:",
            "report.figure1_dataset = 'nq' is not in datasets",
        ),
    ],
)
def test_bad_config_names_the_key(repo, tmp_path, old, new, message):
    bad = tmp_path / "bad.yaml"
    text = (repo / "config" / "config.yaml").read_text()
    assert old in text
    bad.write_text(text.replace(old, new, 1))
    out = subprocess.run(
        snakemake_cmd("-n", "--configfile", str(bad)), cwd=repo, capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    assert message in out.stdout + out.stderr


@pytest.mark.slow
def test_unknown_judgment_method_lists_the_valid_ones(repo, tmp_path):
    bad = tmp_path / "bad.yaml"
    text = (repo / "config" / "config.yaml").read_text()
    line = "  methods: [pointwise, pointwise_pa, listwise_pa, listwise_pa_reject]"
    assert line in text
    bad.write_text(text.replace(line, "  methods: [listwise_pa, pointwise_magic]"))
    out = subprocess.run(
        snakemake_cmd("-n", "--configfile", str(bad)), cwd=repo, capture_output=True, text=True, timeout=120
    )
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "judgments.methods: unknown judgment method 'pointwise_magic'" in text
    assert "pointwise_pa" in text and "listwise_pa_reject" in text


@pytest.mark.slow
def test_snakefmt_clean(repo):
    snakefmt = str(Path(snakemake_cmd()[0]).with_name("snakefmt"))
    out = subprocess.run(
        [snakefmt, "--check", "Snakefile", "rules"], cwd=repo, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr


# A full listwise answer over k candidates: every id in the output format of config/prompts.yaml and a
# 24-word lead-in sentence; a pointwise one, the verdict in its format (the token counts the configs'
# comments state, measured with the demo models' tokenizers by the slow test below).
LEAD_IN = (
    "Based on the question and my own knowledge, the passages that give me useful information I did not already know "
    "are the following ones: "
)
FULL_ANSWER_TOKENS = {
    "smollm2-135m": {
        ("listwise", 20): 82,
        ("rank", 20): 116,
        ("listwise", 5): 41,
        ("rank", 5): 45,
        ("pointwise", 1): 6,
    },
    "gemma3-270m": {("listwise", 20): 81, ("rank", 20): 97, ("listwise", 5): 40, ("rank", 5): 41, ("pointwise", 1): 5},
}


def _most_tokens(form, k):
    return max(counts[(form, k)] for counts in FULL_ANSWER_TOKENS.values())


def _formats(repo):
    from llm_utility.method.judgments import output_format
    from llm_utility.method.prompts import load_prompts

    wording = load_prompts(repo / "config" / "prompts.yaml")
    return {form: output_format(wording, form) for form in ("pointwise", "listwise", "rank")}


@pytest.mark.parametrize("config, k", [("paper.yaml", 20), ("config.yaml", 5)])
def test_output_caps_hold_a_full_listwise_answer(repo, config, k):
    import yaml

    from llm_utility.config import with_defaults

    cfg = yaml.safe_load((repo / "config" / config).read_text())
    assert cfg["top_k"] == k
    judgments, rankings = (
        with_defaults("judgments", cfg.get("judgments", {})),
        with_defaults("rankings", cfg.get("rankings", {})),
    )
    assert judgments["listwise_max_new_tokens"] >= _most_tokens("listwise", k)
    assert rankings["max_new_tokens"] >= _most_tokens("rank", k)
    assert judgments["pointwise_max_new_tokens"] >= _most_tokens("pointwise", 1)
    # The schema's defaults fit the paper's top-20 too, for a config that leaves them out.
    assert with_defaults("judgments", {})["listwise_max_new_tokens"] >= _most_tokens("listwise", 20)
    assert with_defaults("rankings", {})["max_new_tokens"] >= _most_tokens("rank", 20)
    assert with_defaults("judgments", {})["pointwise_max_new_tokens"] >= _most_tokens("pointwise", 1)


@pytest.mark.slow
@pytest.mark.parametrize("slug", ["smollm2-135m", "gemma3-270m"])
def test_full_answer_token_counts_are_the_demo_tokenizers(repo, slug):
    import yaml
    from transformers import AutoTokenizer

    from llm_utility.generation import materialize
    from llm_utility.method.judgments import full_answer

    spec = yaml.safe_load((repo / "config" / "config.yaml").read_text())["llms"][slug]
    tokenizer = AutoTokenizer.from_pretrained(
        materialize(slug, spec, repo / "resources" / "models" / slug)["load_path"]
    )
    formats = _formats(repo)
    for (form, k), stated in FULL_ANSWER_TOKENS[slug].items():
        text = full_answer(form, k, formats[form])
        assert (
            len(tokenizer(text if form == "pointwise" else LEAD_IN + text, add_special_tokens=False)["input_ids"])
            == stated
        )


def test_full_answers_follow_the_output_formats(repo):
    from llm_utility.method.judgments import full_answer

    formats = _formats(repo)
    assert full_answer("listwise", 3, formats["listwise"]) == "My selection:[[1],[2],[3]]."
    assert full_answer("rank", 3, formats["rank"]) == "[1]>[2]>[3]"
    assert full_answer("pointwise", 1, formats["pointwise"]) == "Utility judgment: Yes."
    # A format without placeholders: the ids as the project's earlier examples listed them.
    assert full_answer("listwise", 3, "[1], [3]") == "[1], [2], [3]" and full_answer("rank", 2) == "[1] > [2]"


@pytest.mark.parametrize(
    "form, k, key",
    [
        ("rank", 20, "rankings.max_new_tokens"),
        ("listwise", 20, "judgments.listwise_max_new_tokens"),
        ("pointwise", 1, "judgments.pointwise_max_new_tokens"),
    ],
)
def test_a_cap_that_cannot_hold_a_full_answer_stops_the_job(tmp_path, repo, form, k, key):
    from llm_utility.method.judgments import check_output_cap, full_answer
    from standin import StandInGenerator, stand_in_manifest, write_tiny_model

    gen = StandInGenerator(
        stand_in_manifest(write_tiny_model(tmp_path / "m")),
        {"backend": "transformers", "weights": {"path": str(tmp_path / "m")}, "prompt_format": "chat"},
    )
    fmt = _formats(repo)[form]
    needed = gen.count_tokens([full_answer(form, k, fmt)], special=False)[0]
    check_output_cap(gen, form, k, needed, key, fmt)
    with pytest.raises(ValueError, match=rf"{key} is {needed - 1}, but the full answer \(.*\) takes {needed} tokens"):
        check_output_cap(gen, form, k, needed - 1, key, fmt)


def _reversed(value):
    if isinstance(value, dict):
        return {k: _reversed(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed(v) for v in value]
    return value


def test_canonical_config_ignores_key_order_and_keeps_the_tables_order(repo):
    """What rules build their params from (Snakemake reruns a job when a param's repr changed)."""
    import yaml

    from llm_utility.workflow.canonical import ORDERED_COLLECTIONS, canonical_config

    config = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    same, reordered = canonical_config(config), canonical_config(_reversed(config))
    assert list(same) == sorted(config) and list(reordered) == list(same)
    for key in same:
        if key in ORDERED_COLLECTIONS:
            # The entries keep the order they are written in (rows and columns of the tables),
            # each entry's own keys are canonical.
            assert list(same[key]) == list(config[key]) and list(reordered[key]) == list(reversed(list(config[key])))
            assert all(repr(same[key][name]) == repr(reordered[key][name]) for name in config[key])
        else:
            assert repr(same[key]) == repr(reordered[key]), key
    assert same["prompts"] == config["prompts"]  # lists keep their order
    assert list(same["llms"]["smollm2-135m"]["weights"]) == ["gguf_file", "gguf_package"]


def test_one_onerror_handler():
    """Snakemake keeps the last `onerror` it reads: a second one would silently drop the first (the
    bad-input lines, or the jobs SLURM killed for their memory)."""
    handlers = [
        f"{path.name}:{i}"
        for path in sorted((REPO / "rules").glob("*.smk")) + [REPO / "Snakefile"]
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if line.startswith("onerror:")
    ]
    assert len(handlers) == 1, handlers
