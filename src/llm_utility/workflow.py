"""Glue between the Snakemake workflow and the library: config checks, keyed inputs, where the
operational files live, and ``mock_snakemake`` to run any job's script by hand.

Nothing here is needed to use the library from Python; it is what ``rules/*.smk`` and
``workflow/scripts/*.py`` share.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
_SEP = "|"
# Directory names under results/ that a dataset slug must not shadow.
_RESERVED = {"corpora", "tables", "figures", "logs", "benchmarks"}


# ---------------------------------------------------------------------------------------------------
# Keyed inputs: report rules name each input by its key, jobs read the keys back.


def input_key(kind: str, *parts: str) -> str:
    """The name of a keyed input, e.g. ``input_key("answers", "nq", "llama31-8b", "topk")``."""
    return _SEP.join((kind, *parts))


def keyed_inputs(named: Mapping[str, Any] | Any, kind: str) -> dict[Any, str]:
    """``{key: path}`` of the inputs of one ``kind`` in a rule's named inputs (``snakemake.input``).

    Keys with one part are strings (``queries|nq`` -> ``"nq"``), longer ones tuples
    (``answers|nq|llama31-8b|topk`` -> ``("nq", "llama31-8b", "topk")``).
    """
    items = named.items() if hasattr(named, "items") else named
    out: dict[Any, str] = {}
    for name, path in items:
        parts = name.split(_SEP)
        if parts[0] == kind and len(parts) > 1:
            out[parts[1] if len(parts) == 2 else tuple(parts[1:])] = str(path)
    return out


# ---------------------------------------------------------------------------------------------------
# The schema: the one place defaults live


SCHEMA = REPO / "config" / "schema.yaml"


@functools.lru_cache(maxsize=None)
def _schema() -> dict:
    import yaml

    return yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))


def schema_defaults(section: str) -> dict[str, Any]:
    """The defaults ``config/schema.yaml`` gives the keys of one config ``section``: top-level
    mappings (``figures``, ``judgments``) or one entry of a named collection (``llms``,
    ``retrievers``, ``datasets``, ``corpora``). For using the library outside the workflow, whose
    config snakemake.utils.validate fills from the same schema."""
    node = _schema()["properties"][section]
    if "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
        node = node["additionalProperties"]
    return {k: v["default"] for k, v in node.get("properties", {}).items() if "default" in v}


def with_defaults(section: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` over the schema's defaults for ``section`` (see ``schema_defaults``)."""
    return {**schema_defaults(section), **values}


# ---------------------------------------------------------------------------------------------------
# Config checks the schema cannot express; errors name the offending key.


def check_config(config: Mapping[str, Any]) -> None:
    """Cross-references between sections (after ``snakemake.utils.validate`` filled the defaults)."""
    from .generation.models import normalize_spec

    datasets, corpora, retrievers = config["datasets"], config["corpora"], config["retrievers"]
    for name, ds in datasets.items():
        if name in _RESERVED:
            raise ValueError(f"config: datasets.{name}: '{name}' is reserved for results/{name}/")
        if ds["corpus"] not in corpora:
            raise ValueError(f"config: datasets.{name}.corpus = '{ds['corpus']}' is not in corpora ({list(corpora)})")
        if ds["retriever"] not in retrievers:
            raise ValueError(
                f"config: datasets.{name}.retriever = '{ds['retriever']}' is not in retrievers ({list(retrievers)})"
            )
        if ds["source"] == "worldfacts" and corpora[ds["corpus"]]["source"] != "worldfacts":
            raise ValueError(f"config: datasets.{name}: worldfacts queries need a worldfacts corpus")
    for slug, spec in config["llms"].items():
        normalize_spec(spec, slug)
    from .method.judgments import selection_method

    judgments = config.get("judgments", {})
    for key in ("methods", "rag_methods", "thinking_methods"):
        for name in judgments.get(key, []):
            try:
                selection_method(name)
            except ValueError as err:
                raise ValueError(f"config: judgments.{key}: {err}") from None
    for name in judgments.get("thinking_methods", []):
        if not selection_method(name).thinking:
            raise ValueError(f"config: judgments.thinking_methods: {name!r} does not judge with thinking on")
    for name in judgments.get("thinking_datasets") or []:
        if name not in datasets:
            raise ValueError(f"config: judgments.thinking_datasets: '{name}' is not in datasets ({list(datasets)})")
    report = config.get("report", {})
    figure1 = report.get("figure1_dataset")
    if figure1 is not None and figure1 not in datasets:
        raise ValueError(f"config: report.figure1_dataset = '{figure1}' is not in datasets ({list(datasets)})")


def figure1_dataset(config: Mapping[str, Any]) -> str:
    """The dataset of Figure 1 (right): ``report.figure1_dataset``, or else the first of ``datasets``
    (so a config with datasets of its own needs no edit here)."""
    chosen = config.get("report", {}).get("figure1_dataset")
    return chosen if chosen is not None else next(iter(config["datasets"]))


# ---------------------------------------------------------------------------------------------------
# Operational settings: where the store and the GPU locks live. They are read from the config by the
# job (not passed as rule params), so moving them never invalidates a result.


def store_root(config: Mapping[str, Any], llm: str) -> Path:
    """The generation store directory of one model."""
    return Path(config["store_dir"]) / llm


def gpu_lock_dir(config: Mapping[str, Any]) -> Path | None:
    """The GPU lock folder; None: a node-local default (``llm_utility.gpu.default_lock_dir``)."""
    return Path(config["gpu_lock_dir"]) if config.get("gpu_lock_dir") else None


# ---------------------------------------------------------------------------------------------------
# Running a job's script by hand


def mock_snakemake(rule: str, argv: Sequence[str] | None = None, workdir: str | os.PathLike | None = None) -> Any:
    """The ``snakemake`` object a job of ``rule`` gets, built from the workflow itself.

    ``argv`` (default: the script's command line) holds the job's wildcards as ``name=value``,
    optionally ``--configfile FILE``, and, for a script that serves several rules, the rule's name
    first. So every script also runs by hand, e.g. in a debugger::

        python workflow/scripts/table1.py
        python workflow/scripts/answer.py answer_gold dataset=wf-single llm=smollm2-135m candidates=U

    Run it from the workflow's working directory (the repository root, as ``snakemake`` is): paths
    are the workflow's own, relative to ``workdir`` (default: the current directory). The job's
    inputs must exist (``snakemake <an input>`` makes them). Unlike a real run, nothing checks the
    outputs afterwards.
    """
    from snakemake.api import SnakemakeApi
    from snakemake.dag import DAG
    from snakemake.jobs import Job
    from snakemake.script import Snakemake
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    args = list(sys.argv[1:] if argv is None else argv)
    if args and "=" not in args[0] and not args[0].startswith("-"):
        rule = args.pop(0)
    configfiles: list[Path] = []
    if "--configfile" in args:
        i = args.index("--configfile")
        configfiles = [Path(args[i + 1]).resolve()]
        del args[i : i + 2]
    bad = [a for a in args if "=" not in a]
    if bad:
        raise SystemExit(f"expected wildcards as name=value, got {bad}")
    wildcards = dict(arg.split("=", 1) for arg in args)
    root = Path(workdir or Path.cwd()).resolve()
    try:
        with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
            workflow_api = api.workflow(
                resource_settings=ResourceSettings(cores=os.cpu_count() or 1),
                config_settings=ConfigSettings(configfiles=configfiles),
                snakefile=REPO / "Snakefile",
                workdir=root,
            )
            workflow_api.dag()  # sets the workflow's DAG settings, which a DAG reads
            workflow = workflow_api._workflow
            workflow.global_resources = {}
            target = workflow.get_rule(rule)
            job = Job(target, DAG(workflow, rules=[target]), wildcards_dict=wildcards)
            for path in [*job.output, *job.log]:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            threads = min(job.threads, os.cpu_count() or 1)  # as Snakemake caps them at --cores
            return Snakemake(
                job.input, job.output, job.params, job.wildcards, threads, job.resources,
                job.log, workflow.config, job.rule.name, None,
            )
    finally:
        os.chdir(root)  # the API changes back to where it started; the job's paths are relative to root
