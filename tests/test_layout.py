"""The size of the code: no module of engine/ or playground/ longer than MAX_MODULE_LINES
lines, no function or method longer than MAX_FUNCTION_LINES lines (decorators included).
Each failure lists the offenders by name."""

import ast
from pathlib import Path

from tests.source_tree import ROOT, rel, statements, tree

PACKAGES = ("engine", "playground")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_module_is_longer_than_the_limit():
    lines = {rel(p): len(p.read_text().splitlines()) for p in _modules()}
    long = {name: n for name, n in lines.items() if n > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_longer_than_the_limit():
    long = {}
    for path in _modules():
        for node in statements(tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if (n := node.end_lineno - start + 1) > MAX_FUNCTION_LINES:
                    long[f"{rel(path)}:{node.lineno} {node.name}"] = n
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_check_sees_a_nested_long_function():
    body = "\n".join(f"            x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    module = ast.parse(f"class C:\n    if True:\n        def f():\n{body}\n")
    (node,) = [n for n in statements(module) if isinstance(n, ast.FunctionDef)]
    assert node.end_lineno - node.lineno + 1 == MAX_FUNCTION_LINES + 1
