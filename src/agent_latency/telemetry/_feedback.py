"""What a finished model call teaches: the trim that prepared it, and the endpoint's latency model.

The server's count of a trimmed request goes to the trim's calibration (so the trimmers sharing
it count like the server from the next call on); the time to first token and the prompt tokens
go to the latency model of the endpoint and model.
Each listener's failure is reported and swallowed.
"""

from __future__ import annotations

from agent_latency._latency_model import LATENCY_MODELS
from agent_latency._server_usage import ServerUsage
from agent_latency._trace_link import PendingTrim
from agent_latency.telemetry._log import FailureLog


def learn_from_call(
    *,
    trim: PendingTrim | None,
    server: tuple[str, int] | None,
    model: str | None,
    first_token_ms: float | None,
    usage: ServerUsage,
    failures: FailureLog,
) -> None:
    """Hands what one finished call measured to everything that learns from it.

    Args:
        trim: The trim that prepared the call, if any.
        server: The endpoint's host and port, when the integration says.
        model: The requested model, if known.
        first_token_ms: The call's time to first token; ``None`` for a blocking call (its first
            text waits for the whole answer) and when none was measured.
        usage: What the server reported about the call.
        failures: Where a listener's failure is reported.
    """
    prompt_tokens, cached_tokens = usage.prompt_tokens, usage.cached_tokens
    if trim is not None and trim.calibration is not None and prompt_tokens is not None:
        try:
            trim.calibration.observe(trim.tokens_after, prompt_tokens)
        except Exception as exc:
            failures.report("calibration", exc)
    if first_token_ms is None or prompt_tokens is None:
        return
    try:
        LATENCY_MODELS.model_for(server, model).observe(
            first_token_ms, prompt_tokens, cached_tokens
        )
    except Exception as exc:
        failures.report("latency_model", exc)
