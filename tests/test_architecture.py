"""The package's shape, read from its imports: interfaces that mean something and no cycles.

A subpackage's ``__init__`` is its interface: no module outside ``agent_latency.X`` imports one of
``X``'s private modules, and the scripts import only public names. Tests under ``tests/X/`` may
reach into ``X``'s private modules (they test its parts); every other test uses interfaces. No
two modules import each other, however indirectly, ``TYPE_CHECKING`` imports included. The root
holds the foundation the subpackages share, one idea per module: besides the public ``__init__``
and ``semconv``, every root module is private and imported by at least two subpackages (a module
only one subpackage uses belongs inside it). There is no cap on their number: a cap made
``_wire`` hold three ideas to stay under it. docs/architecture.md draws the result.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import agent_latency

PACKAGE = Path(agent_latency.__file__).resolve().parent
REPO = PACKAGE.parents[1]
TESTS = REPO / "tests"
SCRIPTS = REPO / "scripts"
PUBLIC_ROOT_MODULES = {"__init__", "semconv"}
SUBPACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
TEST_HELPER_FOLDERS = {"support", "scripts"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(path: Path, module: str | None = None) -> Iterator[tuple[int, str]]:
    """Every agent_latency module ``path`` imports, anywhere in it: (line, module name)."""
    package = module if path.name == "__init__.py" else (module or "").rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "agent_latency":
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != "agent_latency":
                continue
            # ``from agent_latency import semconv`` imports the module ``semconv``.
            named = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            yield from ((node.lineno, name) for name in named or [target])


def _is_private_of_another(target: str, importer_package: str | None) -> bool:
    """Whether ``target`` is a private module of a subpackage other than ``importer_package``."""
    parts = target.split(".")
    if len(parts) < 3 or parts[1] not in SUBPACKAGES:
        return False
    private = any(part.startswith("_") for part in parts[2:])
    return private and parts[1] != importer_package


def _subpackage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else None


def test_no_module_imports_another_subpackages_private_module() -> None:
    reaches = [
        f"{path.relative_to(REPO)}:{line} imports {target}"
        for module, path in MODULES.items()
        for line, target in _imports(path, module)
        if _is_private_of_another(target, _subpackage_of(module))
    ]
    assert reaches == []


def test_tests_use_interfaces_except_for_the_package_they_test() -> None:
    reaches = []
    for path in TESTS.rglob("*.py"):
        folder = path.relative_to(TESTS).parts[0] if path.parent != TESTS else None
        tested = folder if folder in SUBPACKAGES else None
        for line, target in _imports(path):
            root_private = target.split(".")[1].startswith("_") if "." in target else False
            if _is_private_of_another(target, tested) or (root_private and folder is not None):
                reaches.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert reaches == []


def test_scripts_use_only_public_interfaces() -> None:
    reaches = [
        f"{path.relative_to(REPO)}:{line} imports {target}"
        for path in SCRIPTS.rglob("*.py")
        for line, target in _imports(path)
        if any(part.startswith("_") for part in target.split(".")[1:])
    ]
    assert reaches == []


def test_no_import_cycle() -> None:
    graph = {
        module: {target for _, target in _imports(path, module) if target in MODULES}
        for module, path in MODULES.items()
    }
    cycles = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    cycles += [[m] for m, targets in graph.items() if m in targets]
    assert cycles == []


def _root_users(module: str) -> set[str]:
    """The subpackages that import the root module ``agent_latency.<module>``."""
    return {
        subpackage
        for importer, path in MODULES.items()
        if (subpackage := _subpackage_of(importer)) is not None
        for _, target in _imports(path, importer)
        if target == f"agent_latency.{module}"
    }


def test_the_root_holds_only_the_shared_foundation() -> None:
    root = {p.stem for p in PACKAGE.glob("*.py")} - PUBLIC_ROOT_MODULES
    assert [name for name in sorted(root) if not name.startswith("_")] == []
    assert {name: _root_users(name) for name in root if len(_root_users(name)) < 2} == {}


def test_tests_mirror_the_source_tree() -> None:
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - TEST_HELPER_FOLDERS == set(SUBPACKAGES)
    for folder in folders - TEST_HELPER_FOLDERS:
        assert all(p.name.startswith("test_") for p in (TESTS / folder).glob("*.py")), folder
    assert not list((TESTS / "support").glob("test_*.py"))


def test_the_checks_see_what_they_look_for() -> None:
    # The walks above find nothing to complain of; they must still find what they look for.
    handler = MODULES["agent_latency.telemetry"]
    assert "agent_latency.telemetry._handler" in {
        t for _, t in _imports(handler, "agent_latency.telemetry")
    }
    assert _is_private_of_another("agent_latency.bench._runner", "cli")
    assert not _is_private_of_another("agent_latency.bench._runner", "bench")
    assert not _is_private_of_another("agent_latency._chat_format", "cli")
    assert _root_users("_server_usage") >= {"telemetry", "doctor"}
    assert _root_users("semconv") >= {"telemetry", "trimming"}
    assert _strongly_connected({"a": {"b"}, "b": {"a"}, "c": set()}) == [{"a", "b"}, {"c"}]


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iteratively: the strongly connected components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components
