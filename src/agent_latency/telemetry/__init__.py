"""Time-to-first-token telemetry: a LangChain callback handler and the OpenTelemetry setup.

:class:`LatencyCallbackHandler` turns model calls, agents, chains and tools into spans and
metrics (docs/telemetry.md names them all; :mod:`agent_latency.semconv` holds the names), never
breaking the host; :func:`configure_telemetry` builds the providers and exporters.
:func:`split_ttft` splits a time to first token into the server's prefill and the rest.

Exports: ``LatencyCallbackHandler``, ``LatencyRecord``, ``RunContextProvider``, ``Telemetry``,
``TtftSplit``, ``configure_telemetry``, ``split_ttft``.
"""

from agent_latency._trace_link import RunContextProvider
from agent_latency.telemetry._handler import LatencyCallbackHandler, LatencyRecord
from agent_latency.telemetry._setup import Telemetry, configure_telemetry
from agent_latency.telemetry._split import TtftSplit, split_ttft

__all__ = [
    "LatencyCallbackHandler",
    "LatencyRecord",
    "RunContextProvider",
    "Telemetry",
    "TtftSplit",
    "configure_telemetry",
    "split_ttft",
]
