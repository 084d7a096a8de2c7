"""The latency benchmark behind ``agent-latency bench``: before/after figures on any endpoint.

:func:`run_bench` sends one agent request in four modes (untrimmed or trimmed, blocking or
streaming), optionally replays a growing conversation turn by turn (``--turns``) and sweeps
prompt sizes to fit the endpoint's prefill cost, all measured with the project's own callback
handler; it returns a :class:`BenchReport` (``to_json()`` is the file ``--json`` writes). A
request the endpoint refuses, or one too long for ``llm.context_window``, fails only its mode
(the report says why); Ctrl-C raises :class:`BenchInterrupted`, a ``KeyboardInterrupt`` holding
the report of what finished, and an endpoint that fails :class:`BenchFailed`, an
:class:`EndpointError` holding it too. :func:`check_regression` turns a report and a baseline
into the ``--baseline`` gate; :func:`saving_breakdown` explains the saving.

:func:`run_mixed_workload` replays interleaved conversations that state facts and ask about
them later, once per strategy (ours and the peers, :func:`workload_strategies`) and, for the
frontier, at every point of each strategy's knob; its :class:`WorkloadReport` holds the waits,
the retention of the facts each question needs, the context sent, hard-limit violations and
refused requests. A report's parts (:class:`ModeResult`, :class:`Sample`,
:class:`StrategyResult` of a replay :class:`Strategy`) are values anyone can read or build.
:func:`run_quality` is the model-free retention benchmark (``--quality``:
generated needle cases at :func:`needle_places`, :func:`make_case`, :func:`retained`).
:func:`write_plot` draws a report, :func:`write_frontier_plot` the ``"frontier"`` entries of
one or more ``--json`` documents (matplotlib, optional). The tables are the CLI's.

The cache-first bench (``scripts/cache_first_bench.py``): :func:`load_public_set` reads a
public long-conversation QA set (LongMemEval, shipped in ``benchmarks/data/``, or LoCoMo) into
:class:`Conversation` objects, a message per turn whose ``id`` is the turn id, and their
:class:`Question` objects with their evidence turns; :func:`cache_first_strategies` names the
strategies compared, each a :data:`StrategyFactory` that builds a :data:`TrimStrategy` per
budget; :func:`evidence_retention` gives an :class:`EvidenceRow` per strategy and budget (all
evidence kept), :func:`growing_replay` a :class:`ReplayRow` (tokens sent and uncached per call
with a one-slot prefix cache, the prompts rendered by a :class:`PromptRenderer`).

Exports: ``BenchFailed``, ``BenchInterrupted``, ``BenchOptions``, ``BenchReport``, ``Conversation``,
``EndpointError``, ``EvidenceRow``, ``MixedWorkload``, ``Mode``, ``ModeResult``, ``NeedleCase``,
``ProgressCallback``, ``PromptRenderer``, ``QualityRow``, ``Question``, ``ReplayRow``,
``RequestRefused``, ``Sample``, ``Strategy``, ``StrategyFactory``, ``StrategyResult``,
``StrategyRun``, ``TrimStrategy``, ``WorkloadProgress``, ``WorkloadReport``,
``cache_first_strategies``, ``check_regression``, ``combined_frontier``,
``evidence_retention``, ``growing_calls``, ``growing_replay``, ``load_baseline``,
``load_public_set``, ``load_scenario``, ``load_scenario_request``, ``make_case``,
``needle_places``, ``open_endpoint``, ``percentile``, ``require_matplotlib``, ``retained``,
``run_bench``, ``run_mixed_workload``, ``run_quality``, ``saving_breakdown``,
``warm_cut_advice``, ``workload_strategies``, ``write_frontier_plot``, ``write_plot``.
"""

from agent_latency.bench._contenders import workload_strategies
from agent_latency.bench._errors import EndpointError, RequestRefused
from agent_latency.bench._evidence import EvidenceRow, evidence_retention
from agent_latency.bench._growing import PromptRenderer, ReplayRow, growing_calls, growing_replay
from agent_latency.bench._measurements import (
    BenchReport,
    Mode,
    ModeResult,
    Sample,
    Strategy,
    StrategyResult,
    percentile,
)
from agent_latency.bench._mixed import MixedWorkload
from agent_latency.bench._plot import require_matplotlib, write_frontier_plot, write_plot
from agent_latency.bench._public_set import Conversation, Question, load_public_set
from agent_latency.bench._quality import (
    NeedleCase,
    QualityRow,
    make_case,
    needle_places,
    retained,
    run_quality,
)
from agent_latency.bench._report import (
    check_regression,
    load_baseline,
    saving_breakdown,
    warm_cut_advice,
)
from agent_latency.bench._runner import (
    BenchFailed,
    BenchInterrupted,
    BenchOptions,
    ProgressCallback,
    open_endpoint,
    run_bench,
)
from agent_latency.bench._scenario import load_scenario, load_scenario_request
from agent_latency.bench._strategies import (
    StrategyFactory,
    TrimStrategy,
    cache_first_strategies,
)
from agent_latency.bench._workload import WorkloadProgress, run_mixed_workload
from agent_latency.bench._workload_report import StrategyRun, WorkloadReport, combined_frontier

__all__ = [
    "BenchFailed",
    "BenchInterrupted",
    "BenchOptions",
    "BenchReport",
    "Conversation",
    "EndpointError",
    "EvidenceRow",
    "MixedWorkload",
    "Mode",
    "ModeResult",
    "NeedleCase",
    "ProgressCallback",
    "PromptRenderer",
    "QualityRow",
    "Question",
    "ReplayRow",
    "RequestRefused",
    "Sample",
    "Strategy",
    "StrategyFactory",
    "StrategyResult",
    "StrategyRun",
    "TrimStrategy",
    "WorkloadProgress",
    "WorkloadReport",
    "cache_first_strategies",
    "check_regression",
    "combined_frontier",
    "evidence_retention",
    "growing_calls",
    "growing_replay",
    "load_baseline",
    "load_public_set",
    "load_scenario",
    "load_scenario_request",
    "make_case",
    "needle_places",
    "open_endpoint",
    "percentile",
    "require_matplotlib",
    "retained",
    "run_bench",
    "run_mixed_workload",
    "run_quality",
    "saving_breakdown",
    "warm_cut_advice",
    "workload_strategies",
    "write_frontier_plot",
    "write_plot",
]
