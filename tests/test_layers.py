"""The library's layers import only downward and no modules import each other in a circle:

    io, metrics, logs (and config, schemas, gpu, weights)   the foundation
    method, data, retrieval, generation                     the paper's method and its engines
    report                                                  analyses, tables, figures, findings
    pipeline                                                the jobs: file paths in, files out
    workflow                                                the Snakemake glue
    init, sizing                                            a config for your own data (a command), its cost

Every import counts, also one inside a function (the circles this test replaced were all of that
kind). Within a layer a package may use another (method asks generation's store for its model
calls) as long as no circle forms.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from workflow_runner import REPO

LAYERS = [
    {"io", "metrics", "logs", "config", "config_reference", "schemas", "gpu", "weights"},
    {"method", "data", "retrieval", "generation"},
    {"report"},
    {"pipeline"},
    {"workflow"},
    {"init", "sizing", "precompile"},
]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(package_dir: Path) -> dict[str, set[str]]:
    """{module: the modules of the same package it imports}, from every import statement (module
    level or not); ``from pkg import name`` counts as importing ``pkg.name`` when that is a module."""
    root = package_dir.parent
    package = package_dir.name
    modules = {_module_name(p, root): p for p in package_dir.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                found |= set(subs) if subs else {target}
        graph[name] = {m for m in found if m == package or m.startswith(package + ".")}
    return graph


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # the package's own __init__
    return next(i for i, names in enumerate(LAYERS) if parts[1] in names)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{importer} (layer {layer_of(importer)}) imports {imported} (layer {layer_of(imported)})"
        for importer, targets in sorted(graph.items())
        for imported in sorted(targets)
        if layer_of(importer) is not None and layer_of(imported) is not None and layer_of(imported) > layer_of(importer)
    ]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same imports between the library's top-level packages and modules (io, method, ...)."""
    top = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    out: dict[str, set[str]] = {}
    for importer, targets in graph.items():
        out.setdefault(top(importer), set()).update(top(t) for t in targets if top(t) != top(importer))
    return out


LIBRARY = imports_of(REPO / "src" / "llm_utility")


def test_every_module_belongs_to_a_layer():
    tops = {m.split(".")[1] for m in LIBRARY if "." in m}
    assert tops == set().union(*LAYERS), "a new top-level module needs a layer in this test and the docs"


def test_no_layer_imports_a_higher_one():
    assert upward_imports(LIBRARY) == []


def test_no_import_circles():
    assert circles(LIBRARY) == []
    assert circles(_package_graph(LIBRARY)) == []


def test_only_the_workflow_glue_imports_snakemake():
    src = REPO / "src" / "llm_utility"
    users = []
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n == "snakemake" or n.startswith("snakemake.") for n in names):
                users.append(str(path.relative_to(src)))
    assert users and all(u.startswith("workflow/") for u in users), users
    # ... and only when a script is run by hand (mock_snakemake), never on import.
    out = subprocess.run(
        [sys.executable, "-c", "import sys, llm_utility.workflow; print('snakemake' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_the_workflow_glue_does_not_import_the_report():
    """The glue never imports the report layer (whose plan is ``report.plan``, which the rule files
    import themselves), and every job's script imports ``llm_utility.workflow`` (its keyed inputs,
    its store, its query part) without the plans, polars or scipy (seconds of every job of the DAG)."""
    glue = {m: targets for m, targets in LIBRARY.items() if m.startswith("llm_utility.workflow")}
    assert glue and not [(m, t) for m, targets in glue.items() for t in targets if t.startswith("llm_utility.report")]
    heavy = ("scipy", "polars", "llm_utility.report", "llm_utility.workflow.model_plan", "snakemake")
    code = f"import sys; import llm_utility.workflow; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[]"]


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "llm_utility" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "llm_utility"


@pytest.mark.parametrize(
    ("files", "upward", "circular"),
    [
        # A foundation module importing the pipeline, inside a function.
        (
            {
                "__init__.py": "",
                "io.py": "def f():\n    from .pipeline import jobs\n",
                "pipeline/__init__.py": "",
                "pipeline/jobs.py": "from ..io import f\n",
            },
            ["llm_utility.io (layer 0) imports llm_utility.pipeline.jobs (layer 3)"],
            [["llm_utility.io", "llm_utility.pipeline.jobs"]],
        ),
        # Two packages of one layer importing each other: allowed upward-wise, but a circle.
        (
            {
                "__init__.py": "",
                "method/__init__.py": "",
                "method/a.py": "from ..generation.b import x\n",
                "generation/__init__.py": "",
                "generation/b.py": "x = 1\ndef g():\n    from ..method import a\n",
            },
            [],
            [["llm_utility.generation.b", "llm_utility.method.a"]],
        ),
        # Downward only: nothing to report.
        (
            {
                "__init__.py": "",
                "report/__init__.py": "from .tables import t\n",
                "report/tables.py": "from ..io import w\nt = 1\n",
                "io.py": "w = 1\n",
            },
            [],
            [],
        ),
    ],
)
def test_the_checks_catch_what_they_should(tmp_path, files, upward, circular):
    graph = imports_of(_write(tmp_path, files))
    assert upward_imports(graph) == upward
    assert circles(graph) == circular


def test_the_gpu_check_modules_import_where_only_torch_is(tmp_path):
    """benchmarks/gpu_check.py runs on a bare GPU image (torch, transformers, sentence-transformers):
    the modules it uses must import without polars, pyarrow, FAISS or vLLM."""
    for name in ("polars", "pyarrow", "faiss", "vllm"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed')\n")
    code = (
        "import llm_utility.generation, llm_utility.gpu; from llm_utility.retrieval.encoders import load_encoder; "
        "from llm_utility.generation import load_generator, AttentionRequest"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": f"{tmp_path}:{REPO / 'src'}", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # The blockers work: importing the index module (it needs polars) fails.
    out = subprocess.run(
        [sys.executable, "-c", "from llm_utility.retrieval import build_index"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": f"{tmp_path}:{REPO / 'src'}", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode != 0 and "polars is not installed" in out.stderr
