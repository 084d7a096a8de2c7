"""The latency benchmark behind ``agent-latency bench``: before/after figures on any endpoint.

:func:`run_bench` sends one agent request in four modes (untrimmed or trimmed, blocking or
streaming), optionally replays a growing conversation turn by turn (``--turns``) and sweeps
prompt sizes to fit the endpoint's prefill cost, all measured with the project's own callback
handler; it returns a :class:`BenchReport` (``to_json()`` is the file ``--json`` writes). A
request the endpoint refuses, or one too long for ``llm.context_window``, fails only its mode
(the report says why). :func:`check_regression` turns a report and a baseline into the
``--baseline`` gate. The parts: the scenario and request ids, the runner, the results with their
statistics, the report's explanations and gate, and the optional plot.

Exports: ``BenchPlan``, ``BenchReport``, ``check_regression``, ``load_baseline``,
``open_endpoint``, ``run_bench``.
"""

from agent_latency.bench._report import check_regression, load_baseline
from agent_latency.bench._results import BenchReport
from agent_latency.bench._runner import BenchPlan, open_endpoint, run_bench

__all__ = [
    "BenchPlan",
    "BenchReport",
    "check_regression",
    "load_baseline",
    "open_endpoint",
    "run_bench",
]
