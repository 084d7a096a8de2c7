"""Checks of a configuration and of the endpoint it points at, each with a fix.

Every check is a plain function of the settings or of a probe's observation and returns a
:class:`CheckResult` (pass, warn or fail, a one-line message, a fix); :func:`run_checks` runs
them all against a live :class:`Endpoint`. Nothing here prints: ``agent-latency doctor``
(:mod:`agent_latency.cli`) shows the results.

Exports: ``CheckResult``, ``CheckStatus``, ``Endpoint``, ``OPENAI_API_ROOT``, ``run_checks``.
"""

from agent_latency.doctor._checks import (
    OPENAI_API_ROOT,
    CheckResult,
    CheckStatus,
    Endpoint,
    run_checks,
)

__all__ = ["CheckResult", "CheckStatus", "Endpoint", "OPENAI_API_ROOT", "run_checks"]
