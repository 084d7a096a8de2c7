"""What a finished model call teaches: the trim's calibration (the server's count of the
request) and the endpoint's latency model (its time to first token)."""

from __future__ import annotations

from agent_latency._latency_model import LATENCY_MODELS
from agent_latency.telemetry._log import FailureLog
from agent_latency.telemetry._record import CallOutcome
from agent_latency.telemetry._run_state import ModelRunState


def learn_from_call(state: ModelRunState, outcome: CallOutcome, failures: FailureLog) -> None:
    """Hands what one finished call measured to everything that learns from it; a learner's
    failure goes to ``failures``."""
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
