"""ruff, pinned in pyproject.toml's dev extra and configured under [tool.ruff], finds nothing in the
project's Python and finds it formatted (fast tier; CI's lint job runs the same checks on its own).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from workflow_runner import REPO

PATHS = ["src", "workflow", "tests", "benchmarks"]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_ruff_is_the_pinned_version():
    """A stale ruff may find other things than CI's: the environment must hold the pinned one."""
    dev = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    (pin,) = [re.fullmatch(r"ruff==(\S+)", d)[1] for d in dev if d.startswith("ruff")]
    out = _ruff("--version")
    assert out.returncode == 0, f"ruff is not installed (`make install` installs the dev extra): {out.stderr}"
    assert out.stdout.split() == ["ruff", pin]


def test_ruff_check_finds_nothing():
    out = _ruff("check", "--no-cache", *PATHS)
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]


def test_ruff_check_catches_what_it_should(tmp_path):
    """The configuration is the project's (line length, rules, import order) and does find things."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\n\n\ndef f():\n    x = 1\n    return undefined_name\n")
    out = _ruff("check", "--no-cache", "--config", str(REPO / "pyproject.toml"), str(bad))
    codes = set(re.findall(r"\b([A-Z]\d{3})\b", out.stdout))
    assert out.returncode == 1 and {"I001", "F401", "F841", "F821"} <= codes, out.stdout


def test_the_code_is_formatted():
    out = _ruff("format", "--check", "--no-cache", *PATHS)
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]
