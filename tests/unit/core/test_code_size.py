"""The size limits the backend-contract issue set for ``dxt_core`` (issue 18): no module
over 800 lines, no function over 80, so that a module holds one idea and a function can be
read at once."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


def _modules() -> list:
    return sorted((ROOT / "dxt_core").rglob("*.py"))


def test_no_module_over_800_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert _modules() and not long, long


def test_no_function_over_80_lines():
    long = {}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert not long, long
