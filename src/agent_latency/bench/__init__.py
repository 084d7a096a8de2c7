"""The latency benchmark behind ``agent-latency bench``: before/after figures on any endpoint.

:func:`run_bench` sends one agent request in four modes (untrimmed or trimmed, blocking or
streaming), optionally replays a growing conversation turn by turn (``--turns``) and sweeps
prompt sizes to fit the endpoint's prefill cost, all measured with the project's own callback
handler; it returns a :class:`BenchReport` (``to_json()`` is the file ``--json`` writes).
:func:`check_regression` turns a report and a baseline into the ``--baseline`` gate.

Exports: ``BenchPlan``, ``BenchReport``, ``check_regression``, ``load_baseline``,
``open_endpoint``, ``run_bench``.
"""

from agent_latency.bench._runner import (
    BenchPlan,
    BenchReport,
    check_regression,
    load_baseline,
    open_endpoint,
    run_bench,
)

__all__ = [
    "BenchPlan",
    "BenchReport",
    "check_regression",
    "load_baseline",
    "open_endpoint",
    "run_bench",
]
