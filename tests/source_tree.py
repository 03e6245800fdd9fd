"""The repository's own source, read as text and syntax trees (for the layout and import
checks)."""

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def statements(node):
    """Every statement under `node`, nested ones included (defs and imports inside functions,
    classes and blocks): no expressions, so much faster than ast.walk."""
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, field, ()):
            yield child
            yield from statements(child)


@functools.cache
def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())
