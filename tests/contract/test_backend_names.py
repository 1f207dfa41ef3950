"""A backend is one package: nothing outside ``dxt_core/backends/<name>/`` (and its DAG file)
names it, so adding one edits no shared file. The toy backend proves it for a new backend:
only its own package names it.

What counts as naming a backend, in the generic files (:data:`GENERIC`): any of its names
(registry name, command, aliases) in the file's *code*: its imports, its identifiers and its
string constants (messages and f-strings included). Docstrings and comments are prose: they
may give a backend as an example ("``ExamonHook``, ``CollectdEsHook``") and are not checked.
Two lines of code may name built-in backends, each in one module-level assignment: the
registry's list (``BUILTIN`` in dxt_core/backends/__init__.py) and the backend the demo runs
(``DEMO_BACKEND`` in dxt_core/demo.py, the demo of the embedded default, which reads all it
needs through the registry).
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from pathlib import Path

from dxt_core.backends import backends
from tests.contract.adapters import ROOT

#: The toy backends, each a package under tests/toy_backend/ (a backend written by following
#: docs/adding-a-backend.md), by their registry names.
TOYS = {
    importlib.import_module(f"tests.toy_backend.{p.name}").BACKEND.name: p
    for p in sorted((ROOT / "tests" / "toy_backend").iterdir())
    if (p / "__init__.py").is_file()
}

#: Files of the generic side not yet free of a backend's name, and why. Each must still name
#: one (the test fails when one no longer does: take it off the list), so the list only shrinks.
NOT_YET_GENERIC: dict[Path, str] = {}

#: The generic side, which must not name a backend: the library outside the backends' own
#: packages (its modules, the simulators' launcher, the writers, the object store, the
#: publishing and the whole Airflow half), the registry, the plugins and the DAG files.
GENERIC = [
    p
    for p in [
        *sorted((ROOT / "dxt_core").glob("*.py")),
        *(
            q
            for part in ("simulate", "writers", "store", "publish", "airflow")
            for q in sorted((ROOT / "dxt_core" / part).rglob("*.py"))
        ),
        ROOT / "dxt_core" / "backends" / "__init__.py",
        ROOT / "dxt_core" / "backends" / "roles.py",
        *sorted((ROOT / "plugins").rglob("*.py")),
        *sorted((ROOT / "dags").glob("*.py")),
    ]
    if p not in NOT_YET_GENERIC
]

#: The one module-level assignment of a file that may name built-in backends.
ALLOWED_ASSIGNMENT = {
    ROOT / "dxt_core" / "backends" / "__init__.py": "BUILTIN",
    ROOT / "dxt_core" / "demo.py": "DEMO_BACKEND",
}


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
    """Imports, identifiers and string constants of ``path`` (docstrings and comments are
    prose), without the file's one allowed assignment (:data:`ALLOWED_ASSIGNMENT`)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    allowed = ALLOWED_ASSIGNMENT.get(path)
    tree.body = [
        n
        for n in tree.body
        if not (
            isinstance(n, ast.Assign) and any(getattr(t, "id", "") == allowed for t in n.targets)
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


def backend_names() -> dict[str, set[str]]:
    """Every registered backend's names: registry name, command and aliases."""
    return {b.name: {b.name, b.command, *b.aliases} for b in backends()}


def named_backends(path: Path) -> list[str]:
    """What ``path``'s code names of the registered backends (``name: [the strings]``),
    its own backend aside for a DAG file (``dags/dxt_<name>.py``)."""
    own = path.stem.removeprefix("dxt_") if path.parent.name == "dags" else None
    code = names_in_code(path)
    out = []
    for backend, names in backend_names().items():
        if backend == own:
            continue
        hits = sorted(
            n
            for n in code
            for name in names
            if re.search(rf"(?<![a-z]){re.escape(name)}(?![a-z])", n, re.I)
        )
        if hits:
            out.append(f"{backend}: {sorted(set(hits))}")
    return out


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


def test_the_generic_side_names_no_backend():
    assert all(p.is_file() for p in GENERIC)
    assert ROOT / "dxt_core" / "cli.py" in GENERIC and len(GENERIC) > 60
    offenders = [
        f"{path.relative_to(ROOT)}: {hit}" for path in GENERIC for hit in named_backends(path)
    ]
    assert offenders == []


def test_the_files_not_yet_generic_still_need_their_exception():
    for path, backend in NOT_YET_GENERIC.items():
        hits = named_backends(path)
        assert any(h.startswith(f"{backend}:") for h in hits), (
            f"{path.relative_to(ROOT)} no longer names {backend}: take it off NOT_YET_GENERIC"
        )


def test_the_rule_catches_a_name_in_code_and_lets_prose_give_examples(tmp_path):
    prose = tmp_path / "prose.py"
    prose.write_text('"""For example ``dxt extract examon``."""\n# e.g. kairosdb\nX = 1\n')
    assert named_backends(prose) == []
    for code in (
        "from dxt_core.backends.examon import cli\n",
        "MSG = f'not an {1} Examon file'\n",
        "DEMO_BACKEND = 'examon'\n",  # allowed in dxt_core/demo.py only
        "x = conn.kairosdb_url\n",
    ):
        (tmp_path / "code.py").write_text(code)
        assert named_backends(tmp_path / "code.py"), code


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
        if call.func.id == "publish_dag":  # generic: no backend named (its doc: DAG_DOC)
            assert call.args == [] and [k.arg for k in call.keywords] == [], path
