"""Which top-level modules a source file imports, read statically (without importing it)."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_top_level_modules(path: Path | str) -> set[str]:
    """Returns the top-level name of every module a Python file imports, anywhere in it.

    Relative imports (``from .x import y``) stay inside the package and are left out.
    """
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
    return names
