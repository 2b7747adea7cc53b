"""``mock_snakemake``: the ``snakemake`` object of any job, built from the workflow itself, so that
every script in ``workflow/scripts`` also runs by hand (in a debugger, say)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .parts import part_dir

REPO = Path(__file__).resolve().parents[3]


def mock_snakemake(rule: str, argv: Sequence[str] | None = None, workdir: str | os.PathLike | None = None) -> Any:
    """The ``snakemake`` object a job of ``rule`` gets, built from the workflow itself.

    ``argv`` (default: the script's command line) holds the job's wildcards as ``name=value``,
    optionally ``--configfile FILE [OVERLAY ...]``, and, for a script that serves several rules, the rule's name
    first. So every script also runs by hand, e.g. in a debugger::

        python workflow/scripts/table1.py
        python workflow/scripts/answer.py answer_gold dataset=wf-single llm=smollm2-135m
        python workflow/scripts/judge.py dataset=nq llm=qwen3-8b part=2-of-4 --configfile config/paper.yaml

    Run it from the workflow's working directory (the repository root, as ``snakemake`` is): paths
    are the workflow's own, relative to ``workdir`` (default: the current directory). The job's
    inputs must exist (``snakemake <an input>`` makes them). Unlike a real run, nothing checks the
    outputs afterwards.
    """
    from .operational import SNAKEMAKE_PATH_ENV

    # Re-executed under llms.<llm>.python (run_in_llm_python), an environment without snakemake:
    # the first interpreter's, after this one's own packages, as Snakemake's script preamble does.
    snakemake_path = os.environ.get(SNAKEMAKE_PATH_ENV)
    if snakemake_path and snakemake_path not in sys.path:
        sys.path.append(snakemake_path)
    from snakemake.api import SnakemakeApi
    from snakemake.dag import DAG
    from snakemake.jobs import Job
    from snakemake.script import Snakemake
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    args = list(sys.argv[1:] if argv is None else argv)
    if args and "=" not in args[0] and not args[0].startswith("-"):
        rule = args.pop(0)
    configfiles: list[Path] = []
    if "--configfile" in args:  # one file or several (an overlay), as Snakemake takes them
        i = args.index("--configfile")
        j = next((k for k in range(i + 1, len(args)) if "=" in args[k] or args[k].startswith("-")), len(args))
        configfiles = [Path(a).resolve() for a in args[i + 1 : j]]
        del args[i:j]
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
            if "part_dir" in target.wildcard_names:
                # A model job of the whole dataset, unless `part=2-of-4` names one of its query parts.
                wildcards["part_dir"] = part_dir(wildcards.pop("part", None))
            job = Job(target, DAG(workflow, rules=[target]), wildcards_dict=wildcards)
            for path in [*job.output, *job.log]:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            threads = min(job.threads, os.cpu_count() or 1)  # as Snakemake caps them at --cores
            job_object = Snakemake(
                job.input,
                job.output,
                job.params,
                job.wildcards,
                threads,
                job.resources,
                job.log,
                workflow.config,
                job.rule.name,
                None,
            )
            # A built workflow leaves its storage registry in snakemake.workflow's namespace, and
            # vLLM 0.32 scans every module's namespace when its engine starts
            # (triton_utils.dispatcher), failing on it: vars() of the registry is a proxy. Jobs that
            # Snakemake runs build no workflow; one run by hand has no use for it any more.
            vars(sys.modules["snakemake.workflow"]).pop("storage", None)
            return job_object
    finally:
        os.chdir(root)  # the API changes back to where it started; the job's paths are relative to root
