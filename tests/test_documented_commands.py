"""Every command the documentation shows runs as written.

The commands are read from README.md, config/README.md, docs/*.md (fenced shell blocks and inline
code) and the profiles' comments. A `snakemake` command that would run jobs must say how many cores
(Snakemake refuses to run locally without `--cores`, and no profile but profiles/paper sets them), and
it dry-runs (`-n` added) in a copy of this checkout, so a key, a rule or a target that does not exist
fails it. A `python -m` command answers `--help`; a `make` command answers `make -n`; a script run
by path exists and knows the options shown.

The extraction and the static checks are fast; the dry-runs are the slow tier: one Snakemake call
per distinct command, the demo config's plain targets batched into one call per config, run two at a
time.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from workflow_runner import snakemake_cmd

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", REPO / "config" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PROFILES = sorted((REPO / "profiles").glob("*/config.yaml"))
RUNNERS = ("snakemake", ".venv/bin/snakemake", "python", ".venv/bin/python", "make")
# Options of `snakemake` that run no job, so need no cores.
NO_JOBS = {"-n", "--dry-run", "--lint", "--report", "--unlock", "--list", "--summary", "--dag"}


@dataclass(frozen=True)
class Command:
    where: str  # file:line
    text: str

    @property
    def args(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def placeholder(self) -> bool:
        """A shape rather than a command: `<llm>`, `results/...`."""
        return "<" in self.text or "..." in self.text


def _strip_comment(line: str) -> str:
    return re.sub(r"\s+#.*$", "", line).strip()


def _is_command(text: str) -> bool:
    """A runner and at least one argument (a bare `snakemake` in prose names the tool)."""
    words = text.split()
    return len(words) > 1 and words[0] in RUNNERS and words[-1] != "-m"  # `python -m` alone names the form


def documented_commands() -> list[Command]:
    found: list[Command] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(REPO)
        fences = []
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            fences.append((m.start(), m.end()))
            if m.group(1) not in ("bash", "sh", "shell", "console"):
                continue
            first = text[: m.start(2)].count("\n") + 1
            for i, line in enumerate(m.group(2).splitlines()):
                line = _strip_comment(line)
                if line and not line.startswith("#") and _is_command(line):
                    found.append(Command(f"{name}:{first + i}", line))
        prose = text
        for start, end in reversed(fences):
            prose = prose[:start] + "\n" * text[start:end].count("\n") + prose[end:]
        for m in re.finditer(r"`([^`]+)`", prose):  # an inline span may wrap onto the next line
            span = " ".join(m.group(1).split())
            if _is_command(span):
                found.append(Command(f"{name}:{prose[: m.start()].count(chr(10)) + 1}", span))
    for profile in PROFILES:
        for i, line in enumerate(profile.read_text().splitlines(), 1):
            if not line.lstrip().startswith("#"):
                continue
            comment = line.lstrip()[1:].strip()
            spans = re.findall(r"`([^`]+)`", comment) or ([comment] if comment.startswith("snakemake ") else [])
            for span in spans:
                if _is_command(span):
                    found.append(Command(f"{profile.relative_to(REPO)}:{i}", _strip_comment(span)))
    return found


COMMANDS = documented_commands()


def _kind(cmd: Command) -> str:
    runner = cmd.args[0].removeprefix(".venv/bin/")
    if runner == "python":
        if cmd.args[1] == "-m":
            return "python -m"
        return "python script" if cmd.args[1].endswith(".py") else "python"
    return runner


def _profile_sets_cores(args: list[str]) -> bool:
    for i, arg in enumerate(args):
        if arg == "--profile":
            profile = yaml.safe_load((REPO / args[i + 1] / "config.yaml").read_text())
            if {"cores", "jobs", "executor"} & set(profile):
                return True
    return False


def test_the_extraction_finds_the_documented_commands():
    texts = {c.text for c in COMMANDS}
    kinds = {_kind(c) for c in COMMANDS}
    assert {"snakemake", "python -m", "python script", "python", "make"} <= kinds, kinds
    assert "make demo" in texts and "snakemake --profile profiles/paper" in texts
    assert any(c.where.startswith("profiles/") for c in COMMANDS)
    assert len(COMMANDS) > 60


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if _kind(c) == "snakemake"], ids=lambda c: c.where)
def test_snakemake_commands_say_how_many_cores(cmd):
    args = cmd.args
    if NO_JOBS & set(args) or _profile_sets_cores(args):
        return
    assert {"--cores", "-c", "--jobs", "-j", "--executor", "-e"} & set(args), (
        f"{cmd.where}: `{cmd.text}` runs jobs without --cores: Snakemake refuses to run it"
    )


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if _kind(c) == "python script"], ids=lambda c: c.where)
def test_scripts_run_by_path_exist_and_know_their_options(cmd):
    script = REPO / cmd.args[1]
    assert script.is_file(), f"{cmd.where}: no such script: {cmd.args[1]}"
    source = script.read_text()
    for option in (a.split("=")[0] for a in cmd.args[2:] if a.startswith("--")):
        assert f'"{option}"' in source or option == "--configfile", f"{cmd.where}: {cmd.args[1]} has no option {option}"


def test_profile_comments_point_to_sections_that_exist():
    """A comment that sends the reader to (page, "Section") names a page and a heading that exist."""
    for path in [*PROFILES, *(REPO / "config").glob("*.yaml"), REPO / "Makefile"]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for page, heading in re.findall(r'\b(README|(?:docs/)?\w+\.md), "([^"]+)"', line):
                target = REPO / ("README.md" if page == "README" else page if "/" in page else f"docs/{page}")
                assert target.is_file(), f"{path.relative_to(REPO)}:{i}: no page {page}"
                headings = re.findall(r"^#{1,6} (.+)$", target.read_text(), re.M)
                assert heading in headings, f'{path.relative_to(REPO)}:{i}: {page} has no section "{heading}"'


# --- the slow tier: every command runs -------------------------------------------------------------


# Commands another slow test dry-runs as written (with --sdm env-modules), which this one need not
# repeat: each a paper DAG of about 800 jobs, about a minute on 2 busy cores.
COVERED = {
    ("--configfile", "config/paper.yaml", "--profile", "profiles/slurm"): (
        "tests/test_profiles.py",
        '_dry_run("--profile", "profiles/slurm")',
    ),
    # The same with conda, which a dry-run never uses: test_profiles runs it with env-modules instead.
    ("--configfile", "config/paper.yaml", "--profile", "profiles/slurm", "--sdm", "conda"): (
        "tests/test_profiles.py",
        '_dry_run("--profile", "profiles/slurm")',
    ),
    ("--profile", "profiles/slurm", "--configfile", "config/paper.yaml", "--sdm", "conda"): (
        "tests/test_profiles.py",
        '_dry_run("--profile", "profiles/slurm")',
    ),
    ("--configfile", "config/paper.yaml", "--profile", "profiles/kubernetes"): (
        "tests/test_profiles.py",
        '_dry_run("--profile", "profiles/kubernetes"',
    ),
}


def test_the_commands_left_to_other_tests_are_dry_run_there():
    for test, call in COVERED.values():
        assert call in (REPO / test).read_text()
    assert (
        '"-n", "--configfile", "config/paper.yaml", "--sdm", "env-modules"'
        in (REPO / "tests" / "test_profiles.py").read_text()
    )


def _dry_runs() -> dict[tuple[str, ...], list[Command]]:
    """One Snakemake call per distinct command (as written, with -n), except that commands giving
    only --cores, targets and at most a --configfile (one file or several) are batched: one call per
    config with all their targets (no target: rule `all`)."""
    calls: dict[tuple[str, ...], list[Command]] = {}
    batched: dict[tuple[str, ...], tuple[list[str], list[Command]]] = {}
    for cmd in COMMANDS:
        if _kind(cmd) != "snakemake" or cmd.placeholder or "--report" in cmd.args:
            continue
        args = cmd.args[1:]
        rest, configfile, i = [], ("config/config.yaml",), 0
        while i < len(args):
            if args[i] == "--configfile":  # every word up to the next option, as Snakemake reads it
                j = next((k for k in range(i + 1, len(args)) if args[k].startswith("-")), len(args))
                configfile, i = tuple(args[i + 1 : j]), j
            elif args[i] in ("--cores", "-c"):
                i += 2
            elif args[i] in ("-n", "--dry-run"):
                i += 1
            else:
                rest.append(args[i])
                i += 1
        if all(not a.startswith("-") for a in rest):
            targets, cmds = batched.setdefault(configfile, ([], []))
            targets.extend(rest or ["all"])
            cmds.append(cmd)
            continue
        key = tuple(a for a in args if a not in ("-n", "--dry-run"))
        if key in COVERED:
            continue
        calls.setdefault(key, []).append(cmd)
    for configfile, (targets, cmds) in batched.items():
        # The targets before --configfile, which takes every word after it as a config file.
        calls[("--cores", "1", *dict.fromkeys(targets), "--configfile", *configfile)] = cmds
    return calls


def _snakemake(checkout: Path, key: tuple[str, ...]) -> subprocess.CompletedProcess:
    args = list(key)
    if "--lint" not in args and "--unlock" not in args:
        args.insert(0, "-n")
    if "--profile" in args:
        profile = yaml.safe_load((checkout / args[args.index("--profile") + 1] / "config.yaml").read_text())
        if profile.get("software-deployment-method") == "conda":
            # A dry-run never uses conda, which this machine need not have; env-modules (declared by no
            # rule) stands in for it, as in CI and tests/test_profiles.py.
            args += ["--sdm", "env-modules"]
        if profile.get("default-storage-provider") == "fs":
            prefix = checkout / "storage"
            (prefix / "config").mkdir(parents=True, exist_ok=True)
            shutil.copy(checkout / "config" / "prompts.yaml", prefix / "config")
            args += ["--default-storage-prefix", str(prefix)]
    return subprocess.run(snakemake_cmd(*args), cwd=checkout, capture_output=True, text=True, timeout=600)


def _write_own_data(checkout: Path, corpus: str, queries: str) -> None:
    """A small DPR-layout TSV and a JSONL of queries, where docs/data.md's command reads them."""
    import json

    (checkout / corpus).parent.mkdir(parents=True, exist_ok=True)
    (checkout / corpus).write_text(
        "id\ttext\ttitle\n" + "".join(f"{i}\tPassage {i} is about the number {i}.\tNumber {i}\n" for i in range(1, 41)),
        encoding="utf-8",
    )
    (checkout / queries).parent.mkdir(parents=True, exist_ok=True)
    (checkout / queries).write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{i}",
                    "question": f"Which number is passage {i} about?",
                    "answers": [str(i)],
                    "human_pids": [str(i)],
                }
            )
            + "\n"
            for i in range(1, 9)
        ),
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of this checkout's tracked files, with config/mine.yaml as docs/data.md makes it: its
    `python -m llm_utility.init` command run on small files at the paths it names."""
    dest = tmp_path_factory.mktemp("checkout")
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in filter(None, files.split("\0")):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    init = next(c for c in COMMANDS if c.where.startswith("docs/data.md") and "llm_utility.init" in c.text)
    args = init.args[3:]
    _write_own_data(dest, args[args.index("--corpus") + 1], args[args.index("--queries") + 1])
    env = {**os.environ, "PYTHONPATH": str(dest / "src")}
    out = subprocess.run(
        [sys.executable, *init.args[1:]], cwd=dest, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, f"{init.where}: {init.text}\n{out.stdout}{out.stderr}"
    assert (dest / args[args.index("--out") + 1]).is_file()
    return dest


@pytest.mark.slow
def test_every_documented_snakemake_command_dry_runs(checkout):
    calls = _dry_runs()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(calls, pool.map(lambda key: _snakemake(checkout, key), calls)))
    failed = [
        f"{', '.join(c.where for c in calls[key])}: snakemake {' '.join(key)}\n{(out.stdout + out.stderr)[-1500:]}"
        for key, out in results.items()
        if out.returncode != 0
    ]
    assert not failed, "\n\n".join(failed)


@pytest.mark.slow
def test_every_documented_python_module_and_make_target_answers():
    modules = {c.args[c.args.index("-m") + 1]: c for c in COMMANDS if _kind(c) == "python -m"}
    failed = []
    for module, cmd in modules.items():
        out = subprocess.run(
            [sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True, timeout=300
        )
        if out.returncode != 0:
            failed.append(f"{cmd.where}: python -m {module} --help\n{out.stderr[-800:]}")
    for cmd in (c for c in COMMANDS if _kind(c) == "python"):  # python -c ...: runs as written
        out = subprocess.run([sys.executable, *cmd.args[1:]], cwd=REPO, capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            failed.append(f"{cmd.where}: {cmd.text}\n{out.stderr[-800:]}")
    for cmd in {c.text: c for c in COMMANDS if _kind(c) == "make" and not c.placeholder}.values():
        out = subprocess.run(["make", "-n", *cmd.args[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            failed.append(f"{cmd.where}: make -n {' '.join(cmd.args[1:])}\n{out.stderr[-800:]}")
    assert not failed, "\n\n".join(failed)
