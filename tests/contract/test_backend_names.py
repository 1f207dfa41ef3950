"""A backend is one package: nothing outside ``dxt_core/backends/<name>/`` (and its DAG file)
names it, so adding one edits no shared file. The toy backend proves it for a new backend:
only its own package names it."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from pathlib import Path

from dxt_core.backends import BUILTIN
from tests.contract.adapters import ROOT

#: The toy backends, each a package under tests/toy_backend/ (a backend written by following
#: docs/adding-a-backend.md), by their registry names.
TOYS = {
    importlib.import_module(f"tests.toy_backend.{p.name}").BACKEND.name: p
    for p in sorted((ROOT / "tests" / "toy_backend").iterdir())
    if (p / "__init__.py").is_file()
}

#: The generic side, which must not name a backend: the Airflow half, the registry, the DAGs.
GENERIC = [
    *sorted((ROOT / "dxt_core" / "airflow").rglob("*.py")),
    ROOT / "dxt_core" / "backends" / "__init__.py",
    ROOT / "dxt_core" / "backends" / "roles.py",
    *sorted((ROOT / "plugins").rglob("*.py")),
    *sorted((ROOT / "dags").glob("*.py")),
]


def tracked_code() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    docs = (".md", ".txt", ".csv", ".json", ".gz", ".hdf5", ".png", ".svg")
    return [ROOT / p for p in out.stdout.splitlines() if not p.endswith(docs)]


def names_in_code(path: Path) -> set[str]:
    """Imports and string constants of ``path`` (docstrings and comments are prose)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    # The registry's one line per backend is where a built-in backend is named.
    tree.body = [
        n
        for n in tree.body
        if not (
            isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "BUILTIN" for t in n.targets)
        )
    ]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                found.add(node.value)
        elif isinstance(node, ast.Name | ast.Attribute):
            found.add(node.id if isinstance(node, ast.Name) else node.attr)
    return found


def test_only_the_toy_package_names_the_toy_backend():
    assert TOYS
    files = [p for p in tracked_code() if p.is_file()]
    for name, package in TOYS.items():
        offenders = [
            str(p.relative_to(ROOT))
            for p in files
            if package not in p.parents and name in p.read_text(errors="replace").lower()
        ]
        assert offenders == [], name


def test_the_generic_airflow_half_names_no_backend():
    assert GENERIC and all(p.is_file() for p in GENERIC)
    offenders = []
    for path in GENERIC:
        own = path.stem.removeprefix("dxt_") if path.parent.name == "dags" else None
        for name in BUILTIN:
            if name == own:
                continue
            word = re.compile(rf"(?<![a-z]){re.escape(name)}(?![a-z])", re.I)
            hits = sorted(n for n in names_in_code(path) if word.search(n))
            if hits:
                offenders.append(f"{path.relative_to(ROOT)}: {name}: {hits}")
    assert offenders == []


#: The DAG builders of dxt_core.airflow a DAG file may call: a backend's DAG, and the one
#: publishing DAG over every backend that publishes.
DAG_BUILDERS = {"backend_dag", "publish_dag"}


def test_a_dag_file_is_one_call():
    toy_dags = [f for p in TOYS.values() for f in p.glob("dxt_*.py")]
    assert len(toy_dags) == len(TOYS)
    for path in sorted((ROOT / "dags").glob("dxt_*.py")) + toy_dags:
        tree = ast.parse(path.read_text())
        calls = [n for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
        assert len(calls) == 1, path
        call = calls[0].value
        assert isinstance(call.func, ast.Name) and call.func.id in DAG_BUILDERS, path
        if call.func.id == "publish_dag":  # generic: no backend named, nothing but the doc
            assert call.args == [] and [k.arg for k in call.keywords] == ["doc_md"], path
