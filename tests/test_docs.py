"""The documentation stays true to the project: the configuration reference is the schema's, every
link of the README and docs/ leads somewhere, and no page points at files users do not have."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from llm_utility import config_reference

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", REPO / "config" / "README.md", *sorted(DOCS.glob("*.md"))]


def _schema() -> dict:
    return yaml.safe_load((REPO / "config" / "schema.yaml").read_text())


def _leaves(node: dict, prefix: str = ""):
    """(dotted key, schema node) of every key the schema defines, written out independently of the
    generator: named collections as ``<name>``, nested mappings key by key."""
    for name, child in node.get("properties", {}).items():
        key = f"{prefix}{name}"
        extra = child.get("additionalProperties")
        if isinstance(extra, dict) and "properties" in extra:
            yield from _leaves(extra, f"{key}.<name>.")
        elif "properties" in child:
            yield key, child
            yield from _leaves(child, f"{key}.")
        else:
            yield key, child


def test_configuration_reference_is_current():
    committed = (DOCS / "configuration.md").read_text(encoding="utf-8")
    fresh = config_reference.reference(config_reference.load_schema())
    assert committed == fresh, f"docs/configuration.md is stale: run `{config_reference.COMMAND}` (make config-docs)"


def test_every_schema_key_has_a_description():
    missing = [key for key, node in _leaves(_schema()) if not node.get("description", "").strip()]
    assert not missing, f"config/schema.yaml: keys without a description: {missing}"


def test_reference_has_every_key_with_its_default():
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    for key, node in _leaves(_schema()):
        if "." not in key and "properties" in node:
            continue  # a top-level section is a heading of its own, its keys are rows
        row = re.search(rf"^\| `{re.escape(key)}` \|[^\n]*$", text, re.M)
        assert row, f"docs/configuration.md has no row for {key}"
        if "default" in node:
            cells = row.group(0).split(" | ")
            # The default cell reads as YAML back to the schema's default.
            assert yaml.safe_load(cells[2].strip("`")) == node["default"], (key, cells[2])


def test_reference_command_writes_the_file(tmp_path):
    out = tmp_path / "configuration.md"
    config_reference.main([str(out)])
    assert out.read_text(encoding="utf-8") == (DOCS / "configuration.md").read_text(encoding="utf-8")


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lowercase, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+://", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_lead_to_existing_files_and_headings(page):
    for target in _links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to a missing file: {target}"
        if anchor:
            assert anchor in _anchors(dest), f"{page.name}: {target}: no such heading in {dest.name}"


def test_readme_is_the_first_day_and_links_every_page():
    readme = REPO / "README.md"
    lines = readme.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail into docs/"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for t in _links(readme)}
    unlinked = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"
    # Every section of every page is one link away from the README (configuration.md is one table).
    targets = {t for t in _links(readme) if "#" in t}
    for page in DOCS.glob("*.md"):
        if page.name == "configuration.md":
            continue
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for heading in re.findall(r"^## (.+)$", text, re.M):
            assert f"docs/{page.name}#{_slug(heading)}" in targets, f"README does not link {page.name}, '{heading}'"


def test_no_page_or_file_cites_the_internal_design_notes():
    # The design notes are not shipped: a fact users need belongs in docs/.
    name = "DESIGN" + ".md"
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    citing = [
        p for p in tracked if (REPO / p).is_file() and name in (REPO / p).read_text(encoding="utf-8", errors="ignore")
    ]
    assert not citing, f"files citing {name}: {citing}"


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/paper.yaml"])
def test_report_description_renders_for_each_config(configfile):
    """report/workflow.rst, the report's opening page, renders as Snakemake renders it (Jinja with
    the validated config, then docutils) without a warning, and names the run's datasets and LLMs."""
    from docutils.core import publish_parts
    from jinja2 import Environment, StrictUndefined
    from snakemake.utils import validate

    snakefile = (REPO / "Snakefile").read_text()
    assert re.search(r'^report: "report/workflow.rst"$', snakefile, re.M)
    config = yaml.safe_load((REPO / configfile).read_text())
    validate(config, str(REPO / "config" / "schema.yaml"))  # fills in the defaults, as the Snakefile does

    class Snakemake:
        pass

    Snakemake.config = config
    env = Environment(trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined)
    template = env.from_string((REPO / "report" / "workflow.rst").read_text())
    text = template.render(snakemake=Snakemake, files=[])
    html = publish_parts(text, writer="html", settings_overrides={"halt_level": 2, "report_level": 5})["html_body"]
    assert "What this run establishes" in html and "the <tt class" in html  # no findings: it says so
    for name in [*config["datasets"], *config["llms"], *config["retrievers"]]:
        assert name in html
    assert "How to read it" in html
    # Each dataset with the retriever that made its candidates; the other retrievers' runs apart.
    summary = re.sub(r"<[^>]+>|\s+", " ", html)
    for name, dataset in config["datasets"].items():
        assert f"{name} ({dataset['retriever']})" in summary
    pools = {d["retriever"] for d in config["datasets"].values()}
    extra = re.search(r"Extra runs : ([^;]*);", summary)
    assert (
        extra and set(re.findall(r"[\w-]+", extra.group(1).split(" on every")[0])) == set(config["retrievers"]) - pools
    )
    assert "retrieved with" not in summary
    # Thinking is among the tables only when an LLM can think (Table 5 is otherwise a note).
    assert ("thinking," in summary) == any(llm.get("can_think") for llm in config["llms"].values())


def test_report_opening_page_shows_the_findings_summary(tmp_path):
    """Snakemake renders report/workflow.rst with `files`, the report's file records (each with its
    `path`, a pathlib.Path): the page includes the findings summary that the findings rule wrote,
    and docutils reads it without a warning."""
    from types import SimpleNamespace

    from docutils.core import publish_parts
    from jinja2 import Environment, StrictUndefined
    from snakemake.utils import validate

    from llm_utility.report.findings.summary import summarize, summary_rst

    entries = [
        {
            "id": "table1_human_over_u",
            "section": "Section 4: the human passages",
            "claim": "Human passages answer at least as many queries as U (Table 1: Human >= U)",
            "unit": "correct answers (%), Human minus U, paired per query",
            "expected": "> 0",
            "construction": "can_fail",
            "status": "run",
            "effect": 40.0,
            "lo": 20.0,
            "hi": 65.0,
            "n": 10,
            "verdict": "holds",
        }
    ]
    summary = tmp_path / "findings_summary.rst"
    summary.write_text(summary_rst(summarize(entries, min_queries=10, llms=["a_1", "b*"])))
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    validate(config, str(REPO / "config" / "schema.yaml"))
    other = SimpleNamespace(path=tmp_path / "findings.md")
    env = Environment(trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined)
    text = env.from_string((REPO / "report" / "workflow.rst").read_text()).render(
        snakemake=SimpleNamespace(config=config), files=[other, SimpleNamespace(path=summary)]
    )
    html = publish_parts(text, writer="html", settings_overrides={"halt_level": 2, "report_level": 5})["html_body"]
    page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))
    assert "This run tests 1 finding with a_1 and b* on 10 queries each, and establishes 1: table1_human_over_u" in page
    assert "Established: Human passages answer at least as many queries as U" in page
    assert page.index("What this run establishes") < page.index("This run tests") < page.index("How to read it")


DURATION = re.compile(r"(?<![\w.])(?:\d[\d,.]*|a|one)\s?(?:minutes?|min|seconds|hours?|GPU-hours)\b|\bin minutes\b")


def _blocks(path: Path) -> list[str]:
    """Paragraphs of a Markdown page (a code block's lines with it), or a file's comment blocks."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        text = re.sub(r"```.*?```", lambda m: m.group(0).replace("\n\n", "\n#\n"), text, flags=re.S)
        return re.split(r"\n\s*\n", text)
    blocks, block = [], []
    for line in text.splitlines():
        if "#" in line:
            block.append(line[line.index("#") :])
        elif block:
            blocks.append("\n".join(block))
            block = []
    return [*blocks, "\n".join(block)]


def test_stated_times_are_measured_and_budgets_say_so():
    """A time stated outside performance.md (the measurements) and cluster.md (the estimates) comes
    with a link to one of them, and a time that is a target, not a measurement, says it is a budget:
    `make demo` within 15 minutes was its budget while it measured 34."""
    files = [
        REPO / "README.md",
        REPO / "config" / "README.md",
        REPO / "Makefile",
        REPO / "pyproject.toml",
        *(p for p in DOCS.glob("*.md") if p.name not in ("performance.md", "cluster.md", "configuration.md")),
        *(REPO / "config").glob("*.yaml"),
        *(REPO / "profiles").glob("*/config.yaml"),
    ]
    for path in files:
        for block in _blocks(path):
            flat = " ".join(block.split())
            if not DURATION.search(flat):
                continue
            where = f"{path.relative_to(REPO)}: {flat[:120]}"
            assert "performance.md" in flat or "cluster.md" in flat, f"a time without its measurement: {where}"
            if re.search(r"\b(within|under|stays?|must)\b[^.]{0,40}\b(\d+ min|minutes?|a minute)\b", flat):
                assert "budget" in flat, f"a target stated as if it were what it takes: {where}"
