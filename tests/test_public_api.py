"""The public surface is explicit: sorted ``__all__`` lists, importable names, light imports."""

import importlib
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from support.source_imports import imported_top_level_modules

import agent_latency

EXPECTED_PUBLIC_NAMES = [
    "Action",
    "ClassFigures",
    "ConfigError",
    "LLMSettings",
    "LatencyCallbackHandler",
    "LatencyCoefficients",
    "LatencyModel",
    "LatencyRecord",
    "MessageDecision",
    "MetricsSettings",
    "PriorityClass",
    "PriorityTrimmer",
    "PromptSettings",
    "Rule",
    "RunContextProvider",
    "Settings",
    "StreamingSettings",
    "Telemetry",
    "TokenCounter",
    "TokenCounting",
    "TrimResult",
    "TrimmingMiddleware",
    "__version__",
    "build_chat_model",
    "configure_telemetry",
    "load_settings",
    "trimmer_from_settings",
]
SUBPACKAGES = ["bench", "cli", "config", "doctor", "sim", "telemetry", "tokens", "trimming"]
TYPE_ALIASES = {"Action", "PriorityClass", "Rule"}
PACKAGE = Path(agent_latency.__file__).parent


def isort_order(names: list[str]) -> list[str]:
    """``names`` as ruff's RUF022 sorts an ``__all__``: constants, then classes, then the rest."""

    def key(name: str) -> tuple[int, str]:
        kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
        return kind, name

    return sorted(names, key=key)


def test_all_is_pinned_and_sorted() -> None:
    assert agent_latency.__all__ == EXPECTED_PUBLIC_NAMES
    assert agent_latency.__all__ == isort_order(agent_latency.__all__)


def test_every_public_name_resolves_and_lives_in_a_private_module() -> None:
    for name in agent_latency.__all__:
        value = getattr(agent_latency, name)
        if name == "__version__":
            assert isinstance(value, str) and value[0].isdigit()
        elif name in TYPE_ALIASES:
            assert typing.get_origin(value) is typing.Literal, name
        else:
            module = importlib.import_module(value.__module__)
            assert module.__name__.split(".")[-1].startswith("_"), (name, module.__name__)


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_each_subpackage_explains_itself_and_exports_a_sorted_all(name: str) -> None:
    package = importlib.import_module(f"agent_latency.{name}")
    assert package.__doc__ and len(package.__doc__.split()) > 20
    assert package.__all__ == isort_order(package.__all__)
    for exported in package.__all__:
        assert getattr(package, exported) is not None
        assert (
            f"``{exported}``" in package.__doc__
            or f"`{exported}`" in package.__doc__
            or (name == "sim")
        ), (name, exported)


def test_modules_are_private_except_the_public_names_module() -> None:
    public = sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if not path.name.startswith("_")
    )
    assert public == ["semconv.py"]


def test_the_package_is_typed() -> None:
    assert (PACKAGE / "py.typed").is_file()


def test_the_library_parts_import_neither_typer_nor_rich() -> None:
    # Only the CLI may use typer and rich; the library's own modules never import them.
    assert "typer" in imported_top_level_modules(PACKAGE / "cli" / "_app.py")  # the walk sees it
    for part in ("doctor", "telemetry", "trimming", "bench"):
        for path in (PACKAGE / part).rglob("*.py"):
            assert imported_top_level_modules(path).isdisjoint({"typer", "rich"}), path


def test_importing_the_package_loads_no_model_client_cli_or_server() -> None:
    # openai and langchain_openai come with build_chat_model, on first use; the CLI and the
    # simulator's server with their extras; numpy only with quicktok's batch API, never called.
    heavy = ("openai", "langchain_openai", "typer", "rich", "starlette", "uvicorn", "numpy")
    code = (
        "import sys, agent_latency; "
        "agent_latency.PriorityTrimmer(500).trim([{'role': 'user', 'content': 'hi'}]); "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_build_chat_model_is_imported_on_first_use() -> None:
    code = (
        "import sys, agent_latency; before = 'langchain_openai' in sys.modules; "
        "agent_latency.build_chat_model; print(before, 'langchain_openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("missing", ["typer", "starlette"])
def test_the_command_line_without_its_extra_names_the_install(missing: str) -> None:
    code = (
        f"import sys; sys.modules[{missing!r}] = None; "
        # sim needs both (--version, which loads no command, needs typer only).
        "from agent_latency.cli import main; sys.exit(main(['sim', '--help']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1, out.stderr
    assert missing in out.stderr and "pip install 'agent-latency[cli]'" in out.stderr


def test_importing_the_library_stays_light() -> None:
    # rich is left out: httpx imports it for its own CLI whenever it is installed.
    code = (
        "import sys, agent_latency, agent_latency.doctor, agent_latency.bench; "
        "print(sorted(m for m in ('typer', 'starlette', 'uvicorn', 'grpc') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_importing_the_package_does_not_import_the_optional_agent_frameworks() -> None:
    code = (
        "import sys, agent_latency; print('langchain' in sys.modules, 'langgraph' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_cli_reports_its_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agent_latency.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == f"agent-latency {agent_latency.__version__}"
