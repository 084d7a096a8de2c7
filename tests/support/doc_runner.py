"""Runs the shell sessions of a Markdown doc as written, so every documented command is tested.

Fenced blocks marked ``console`` are run; ``sh``, ``text`` and other blocks are illustrative
(commands that cannot run in a test: ``make``, ``pip``, ``docker``). ``python`` blocks are run
only when the session is asked to (see :meth:`DocSession.run_document`).

In a ``console`` block, ``$ `` starts a command; the lines after it, up to the next command, are
expected output. Each must match a line of the real output (``…`` matches anything within the
line), in order; other output lines may come in between. A command that shows no output must
succeed, and no output may hold a Python traceback. The commands a block may use:

- ``agent-latency sim ... &``: a simulator in the background, started through the real
  ``sim`` command (so its options are checked) but served on a free port; every address the doc
  gives it (``127.0.0.1:8000``, ``localhost:8000``) is mapped to the real one in commands, files
  and expected output. ``kill %N`` stops the N-th one.
- ``agent-latency ...``: the CLI, in-process through ``agent_latency.cli._app.main``.
- ``python FILE.py ...``: a subprocess with this interpreter, unbuffered, stdout and stderr
  merged as in a terminal, stopped after :data:`PYTHON_TIMEOUT_S`.
- ``cat > FILE <<'EOF'`` ... ``EOF`` writes a file; ``cat FILE`` prints one; ``echo $?`` prints
  the status of the last command.

Commands run in a fresh directory in which the checkout's ``examples/`` and ``scripts/``
appear (as symlinks): paths relative to the checkout work, and the files a doc writes stay out
of it. The collector a doc sends traces to (``localhost:4318``, OpenTelemetry's default, where
Jaeger's collector listens) is an :class:`~otlp_receiver.OTLPReceiver` standing in for it: its
address is mapped like a simulator's, and ``OTEL_EXPORTER_OTLP_ENDPOINT`` points there, so a
test can check what arrived.
A ``python`` block whose first line is ``# NAME.py`` is written to that file, for a later
``$ python NAME.py``; other ``python`` blocks are run as scripts and must succeed.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.otlp_receiver import OTLPReceiver

import agent_latency.sim
from agent_latency import cli as _cli
from agent_latency.sim import SimulatorConfig, running_simulator

REPO = Path(__file__).resolve().parents[2]
# What a doc may use by its path relative to the checkout.
CHECKOUT_DIRS = ("examples", "scripts")
PYTHON_TIMEOUT_S = 120
# Variables that would point the documented commands at another endpoint or collector.
ISOLATED_PREFIXES = ("AGENT_LATENCY_", "OPENAI_", "OTEL_")
COLLECTOR_ADDRESSES = ("localhost:4318", "127.0.0.1:4318")

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_HEREDOC = re.compile(r"cat > (\S+) <<'EOF'")
_SCRIPT_NAME = re.compile(r"# (\w+\.py)")
_TRACEBACK = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Block:
    """A fenced block of a Markdown file: its language tag and its text."""

    language: str
    text: str


def fenced_blocks(markdown: str) -> list[Block]:
    """The fenced blocks of ``markdown``, in order."""
    return [Block(language, text) for language, text in _FENCE.findall(markdown)]


class DocSession:
    """A shell session in which a doc's blocks run one after another, sharing state.

    Create it with :func:`doc_session`.
    """

    def __init__(
        self,
        stack: ExitStack,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
        collector: OTLPReceiver,
    ) -> None:
        self._stack = stack
        self._capsys = capsys
        self._monkeypatch = monkeypatch
        self.collector = collector
        """The collector standing in for the one at ``localhost:4318``."""
        collector_address = collector.endpoint.removeprefix("http://")
        self._addresses = dict.fromkeys(COLLECTOR_ADDRESSES, collector_address)
        self._jobs: list[ExitStack] = []
        self._status: int | None = None

    def run_document(self, path: Path, *, run_python: bool = False) -> int:
        """Runs the blocks of the doc at ``path``; returns how many commands and scripts ran.

        Args:
            path: The Markdown file.
            run_python: Also run (or save) its ``python`` blocks.
        """
        ran = 0
        for block in fenced_blocks(path.read_text(encoding="utf-8")):
            if block.language == "console":
                ran += self.run_console(block.text.splitlines())
            elif block.language == "python" and run_python:
                ran += self.run_python(block.text)
        return ran

    def run_console(self, lines: list[str]) -> int:
        """Runs one console block; returns how many commands it held."""
        commands = 0
        index = 0
        while index < len(lines):
            assert lines[index].startswith("$ "), f"not a command: {lines[index]!r}"
            command = lines[index].removeprefix("$ ")
            commands += 1
            index += 1
            heredoc = _HEREDOC.fullmatch(command)
            if heredoc:
                end = lines.index("EOF", index)
                self._write(heredoc[1], "\n".join(lines[index:end]) + "\n")
                index = end + 1
                continue
            expected: list[str] = []
            while index < len(lines) and not lines[index].startswith("$ "):
                expected.append(lines[index])
                index += 1
            output = self._output_of(command)
            assert _TRACEBACK not in output, f"{command!r} crashed:\n{output}"
            if not expected:
                assert self._status == 0, f"{command!r} exited with {self._status}:\n{output}"
            self._check_output(command, output, expected)
        return commands

    def run_python(self, code: str) -> int:
        """Saves a ``# NAME.py`` block to NAME.py (returns 0); runs any other one (returns 1)."""
        name = _SCRIPT_NAME.fullmatch(code.split("\n", 1)[0])
        if name:
            self._write(name[1], code)
            return 0
        self._write("_doc_block.py", code)
        output = self._run_script(["python", "_doc_block.py"])
        assert self._status == 0 and _TRACEBACK not in output, f"python block failed:\n{output}"
        return 1

    def _write(self, name: str, content: str) -> None:
        path = Path(name).resolve()
        assert not path.is_relative_to(REPO), f"a doc must not write into the checkout: {name}"
        path.write_text(self._local(content), encoding="utf-8")

    def _output_of(self, command: str) -> str:
        words = shlex.split(self._local(command), comments=True)
        background = words[-1] == "&"
        words = words[:-1] if background else words
        if words == ["echo", "$?"]:
            return str(self._status)
        if words[0] == "cat" and len(words) == 2:
            self._status = 0
            return Path(words[1]).read_text(encoding="utf-8")
        if words[0] == "kill":
            for job in words[1:]:
                self._jobs[int(job.removeprefix("%")) - 1].close()
            self._status = 0
            return ""
        if words[:2] == ["agent-latency", "sim"]:
            assert background, f"a documented simulator runs in the background: {command!r}"
            self._start_simulator(words[2:])
            return ""
        assert not background, f"only `agent-latency sim` runs in the background: {command!r}"
        if words[0] == "agent-latency":
            self._status = _cli.main(words[1:])
            captured = self._capsys.readouterr()
            return captured.out + captured.err
        if words[0] in ("python", "python3"):
            return self._run_script(words)
        raise AssertionError(
            f"not runnable in a test: {command!r}; show it in a ```sh block instead"
        )

    def _start_simulator(self, options: list[str]) -> None:
        """Runs the real ``sim`` command, serving its simulator on a free port instead."""
        job = self._stack.enter_context(ExitStack())
        self._jobs.append(job)

        def serve(config: SimulatorConfig, host: str, port: int, **_: object) -> None:
            sim = job.enter_context(running_simulator(config))
            for documented in (f"{host}:{port}", f"localhost:{port}"):
                self._addresses[documented] = f"127.0.0.1:{sim.port}"

        serve.doc_session_serve = True  # type: ignore[attr-defined]
        with self._monkeypatch.context() as patch:
            # Wherever the CLI took the name from (a module-level import binds it early): the
            # real function, or an earlier session's serve, which a module first imported while
            # that session's patch was in place keeps for good.
            real = agent_latency.sim.run_simulator
            for module in list(sys.modules.values()):
                bound = getattr(module, "run_simulator", None)
                if bound is real or getattr(bound, "doc_session_serve", False):
                    patch.setattr(module, "run_simulator", serve)
            self._status = _cli.main(["sim", *options])
        captured = self._capsys.readouterr()
        assert self._status == 0, f"sim {' '.join(options)}: {captured.err}"

    def _run_script(self, words: list[str]) -> str:
        try:
            completed = subprocess.run(
                [sys.executable, *words[1:]],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=PYTHON_TIMEOUT_S,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                check=False,
            )
        except subprocess.TimeoutExpired as timeout:
            pytest.fail(f"{' '.join(words)} ran longer than {PYTHON_TIMEOUT_S} s:\n{timeout}")
        self._status = completed.returncode
        return completed.stdout

    def _local(self, text: str) -> str:
        """``text`` with every documented address replaced by the one really serving it."""
        if not self._addresses:
            return text
        # One pass, longest first, never inside a longer port: a real address is not rewritten
        # again (127.0.0.1:43189 holds the documented 127.0.0.1:4318).
        documented = sorted(self._addresses, key=len, reverse=True)
        pattern = re.compile(f"(?:{'|'.join(map(re.escape, documented))})(?!\\d)")
        return pattern.sub(lambda found: self._addresses[found.group(0)], text)

    def _check_output(self, command: str, output: str, expected: list[str]) -> None:
        """Each expected line ("…" matching anything) must match an output line, in order."""
        remaining = output.splitlines()
        for wanted in expected:
            pattern = re.compile(".*".join(map(re.escape, self._local(wanted).split("…"))))
            for position, line in enumerate(remaining):
                if pattern.fullmatch(line):
                    remaining = remaining[position + 1 :]
                    break
            else:
                pytest.fail(f"{command!r}: no line matches {wanted!r} in:\n{output}")


@contextmanager
def doc_session(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[DocSession]:
    """A session in ``workdir`` (made the working directory) with no endpoint, key or collector
    of the environment leaking in; its simulators and collector stop on exit."""
    for name in list(os.environ):
        if name.startswith(ISOLATED_PREFIXES):
            monkeypatch.delenv(name)
    for name in CHECKOUT_DIRS:
        (workdir / name).symlink_to(REPO / name, target_is_directory=True)
    monkeypatch.chdir(workdir)
    with ExitStack() as stack:
        collector = stack.enter_context(OTLPReceiver())
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
        yield DocSession(stack, capsys, monkeypatch, collector)
