"""Time-to-first-token telemetry: a LangChain callback handler and the OpenTelemetry setup.

:class:`LatencyCallbackHandler` turns every chat-model, agent, tool and chain run into an
OpenTelemetry span (GenAI semantic conventions) and records TTFT, total duration, stalls and
threshold breaches as spans, events and metrics; :func:`configure_telemetry` builds the SDK
providers and exporters (OTLP over HTTP or gRPC, console, none) and returns a
:class:`Telemetry` that hands out handlers and shuts down cleanly. Telemetry never breaks the
application: a failure inside a callback is logged and swallowed. The names it emits are in
:mod:`agent_latency.semconv`; docs/telemetry.md describes them all. :func:`split_ttft` is the
rule that splits a time to first token into the server's prefill and the rest
(:class:`TtftSplit`), for anything else that reports the split (doctor).

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
