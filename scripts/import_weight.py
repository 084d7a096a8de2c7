"""How heavy ``import agent_latency`` is, beside what the middleware cannot do without.

The baseline imports what the library needs anyway: a LangChain ``Runnable``, a callback handler,
messages, the OpenTelemetry SDK (traces and metrics) and tiktoken. Each import runs in a fresh
interpreter; the two alternate, so machine load hits both alike. Prints the median and minimum
of each, the ratio of the medians, and the modules each loads.

Usage: .venv/bin/python scripts/import_weight.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

BASELINE = (
    "from langchain_core.runnables import Runnable; "
    "from langchain_core.callbacks import BaseCallbackHandler; "
    "from langchain_core.messages import BaseMessage; "
    "import opentelemetry.sdk.trace, opentelemetry.sdk.metrics; "
    "import tiktoken"
)
LIBRARY = "import agent_latency"
HEAVY = ("openai", "langchain_openai", "typer", "rich", "starlette", "uvicorn", "numpy")


def timed(code: str) -> float:
    """Seconds a fresh interpreter takes to run ``code`` and exit."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


def loaded(code: str) -> tuple[int, list[str]]:
    """How many modules ``code`` leaves in ``sys.modules``, and which of HEAVY among them."""
    probe = (
        f"{code}; import sys; print(len(sys.modules)); "
        f"print(*[m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    count, heavy = [*out.stdout.splitlines(), ""][:2]
    return int(count), heavy.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="imports of each, alternating")
    runs = parser.parse_args().runs
    timed(LIBRARY)  # warm the file cache and bytecode for both
    timed(BASELINE)
    library, baseline = [], []
    for _ in range(runs):
        library.append(timed(LIBRARY))
        baseline.append(timed(BASELINE))
    for name, code, times in (
        ("baseline", BASELINE, baseline),
        ("agent_latency", LIBRARY, library),
    ):
        modules, heavy = loaded(code)
        print(
            f"{name:14} median {statistics.median(times) * 1000:6.0f} ms  "
            f"min {min(times) * 1000:6.0f} ms  {modules:5} modules  "
            f"heavy: {', '.join(heavy) or 'none'}"
        )
    ratio = statistics.median(library) / statistics.median(baseline)
    print(f"ratio (medians): {ratio:.2f}x over {runs} runs each")


if __name__ == "__main__":
    main()
