"""What a finished model call teaches: the trim that prepared it, and the endpoint's latency model.

The server's count of a trimmed request goes to the trim's calibration (so the trimmers sharing
it count like the server from the next call on); the time to first token and the prompt tokens
go to the latency model of the endpoint and model.
Each listener's failure is reported and swallowed.
"""

from __future__ import annotations

from agent_latency._latency_model import LATENCY_MODELS
from agent_latency.telemetry._log import FailureLog
from agent_latency.telemetry._record import CallOutcome
from agent_latency.telemetry._run_state import ModelRunState


def learn_from_call(state: ModelRunState, outcome: CallOutcome, failures: FailureLog) -> None:
    """Hands what one finished call measured to everything that learns from it.

    Args:
        state: The call: the trim that prepared it, its endpoint and requested model.
        outcome: What it measured: the server's usage and the time to first token.
        failures: Where a listener's failure is reported.
    """
    trim, prompt_tokens = state.trim, outcome.usage.prompt_tokens
    if trim is not None and trim.calibration is not None and prompt_tokens is not None:
        try:
            trim.calibration.observe(trim.tokens_after, prompt_tokens)
        except Exception as exc:
            failures.report("calibration", exc)
    if outcome.first_token_ms is None or prompt_tokens is None:
        return
    try:
        LATENCY_MODELS.model_for(state.server, state.model).observe(
            outcome.first_token_ms, prompt_tokens, outcome.usage.cached_tokens
        )
    except Exception as exc:
        failures.report("latency_model", exc)
