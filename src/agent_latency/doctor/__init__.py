"""Checks of a configuration and of the endpoint it points at, each with a fix.

Every check is a plain function of the settings or of a probe's observation and returns a
:class:`CheckResult` (pass, warn or fail, a one-line message, a fix; both safe to print: control
characters from settings or server answers are escaped, see :func:`printable`);
:func:`run_checks` runs them all against a live :class:`Endpoint`: the settings, the API root,
key and model, the output limit, streaming and streamed usage, the prefill cost, the tokenizer's
error against the server's count, the prefix cache, and the latency model those probes teach.
Nothing here prints: ``agent-latency doctor`` (:mod:`agent_latency.cli`) shows the results.
``seed_latency_model`` runs only the prefill probes, to teach the endpoint's latency model (the
one the callback handler feeds) at an application's startup.

Exports: ``CheckResult``, ``CheckStatus``, ``Endpoint``, ``printable``, ``run_checks``,
``seed_latency_model``.
"""

from agent_latency.doctor._check_result import CheckResult, CheckStatus, printable
from agent_latency.doctor._latency import seed_latency_model
from agent_latency.doctor._probes import Endpoint
from agent_latency.doctor._run import run_checks

__all__ = [
    "CheckResult",
    "CheckStatus",
    "Endpoint",
    "printable",
    "run_checks",
    "seed_latency_model",
]
