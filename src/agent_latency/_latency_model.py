"""How long an endpoint takes to its first token: the learned latency model and its fit.

:class:`LatencyModel` is what the handler feeds and ``doctor`` checks; :func:`fit_prefill` fits
it to ``bench``'s sweep of budgets and ``doctor``'s prefill probes. The model is::

    TTFT ≈ a + b · uncached + c · uncached · context + d · context

where ``uncached`` is the prompt tokens the server has to prefill (the prompt less the tokens it
reports as cached) and ``context`` the whole prompt, which those attend over. ``a`` is the fixed
cost (network, queueing, scheduling), ``b`` the prefill cost per token, ``c`` how that cost grows
with the context (attention is quadratic: llama.cpp shows it) and ``d`` what every prompt token
costs even when cached (converting, sending and tokenizing the request, matching the cache).

It is fitted online by ridge-regularised least squares toward priors (the simulator's defaults),
no coefficient below 0, from 4×4 sufficient statistics discounted by a forgetting factor: constant
memory, following an endpoint whose speed changes. Safe to share between threads.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Final

from agent_latency._caches import LRUCache
from agent_latency._redaction import host_and_port
from agent_latency._server_usage import MAX_REPORTED_TOKENS
from agent_latency._validation import checked_int, checked_number

_KILO: Final = 1000.0
"""Features are in thousands of tokens (and millions of token pairs), to keep the fit well
conditioned."""
MAX_TTFT_MS: Final = 86_400_000.0
"""A day: no time to first token is longer (a larger one is a unit or clock error)."""


@dataclass(frozen=True, slots=True)
class LatencyCoefficients:
    """The coefficients of ``TTFT = a + b · uncached + c · uncached · context + d · context``.

    Attributes:
        fixed_ms: ``a``: milliseconds every call costs.
        ms_per_token: ``b``: milliseconds per prefilled token.
        ms_per_token_per_ktoken: ``c``: extra milliseconds per prefilled token for every 1,000
            tokens of context it attends over.
        ms_per_context_token: ``d``: milliseconds per prompt token, cached or not.
    """

    fixed_ms: float
    ms_per_token: float
    ms_per_token_per_ktoken: float
    ms_per_context_token: float = 0.0


DEFAULT_PRIORS: Final = LatencyCoefficients(
    fixed_ms=200.0, ms_per_token=0.16, ms_per_token_per_ktoken=0.03
)
"""Before any call is observed: the embedded simulator's default latency model (fitted to
Gemma 3 270M on llama.cpp, docs/real-model.md)."""


def _check(name: str, value: object, minimum: float, *, above: bool = False) -> float:
    return checked_number("LatencyModel", name, value, minimum=minimum, above=above)


_N: Final = 4  # coefficients


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Solves a small symmetric positive definite system by Gaussian elimination."""
    n = len(vector)
    rows = [[*matrix[i], vector[i]] for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(col + 1, n):
            factor = rows[r][col] / rows[col][col]
            for k in range(col, n + 1):
                rows[r][k] -= factor * rows[col][k]
    solution = [0.0] * n
    for r in reversed(range(n)):
        known = sum(rows[r][k] * solution[k] for k in range(r + 1, n))
        solution[r] = (rows[r][n] - known) / rows[r][r]
    return solution


def _solve_non_negative(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Minimises ``θᵀ·matrix·θ − 2·θᵀ·vector`` over ``θ ≥ 0`` (``matrix`` positive definite): a
    negative coefficient (context cheaper the longer it is) would tell the trimmer to keep more.
    When the free solution has one, each set pinned at 0 is tried (16), the best feasible kept."""
    free = _solve(matrix, vector)
    if min(free) >= 0:
        return free
    best, best_cost = [0.0] * _N, 0.0  # all pinned at 0 is feasible, of cost 0
    for mask in range(1, 1 << _N):
        kept = [i for i in range(_N) if mask >> i & 1]
        part = _solve([[matrix[i][j] for j in kept] for i in kept], [vector[i] for i in kept])
        if min(part) < 0:
            continue
        cost = -sum(v * vector[i] for v, i in zip(part, kept, strict=True))
        if cost < best_cost:
            best, best_cost = [0.0] * _N, cost
            for v, i in zip(part, kept, strict=True):
                best[i] = v
    return best


class LatencyModel:
    """Predicts the time to first token of a prompt, learning from the calls it is shown.

    Args:
        priors: The coefficients before any call is observed, and the ridge's target.
        prior_weight: How many calls' worth of evidence the priors count as (per coefficient,
            at 1,000 prefilled tokens and 1,000 tokens of context); more calls outweigh them.
        forgetting: The weight an observation keeps after each newer one (``1`` never forgets;
            ``0.98`` halves an observation's weight after about 35 calls).

    Raises:
        TypeError: When an option is not a number; the message names it.
        ValueError: When an option is out of range; the message names it.
    """

    def __init__(
        self,
        priors: LatencyCoefficients = DEFAULT_PRIORS,
        *,
        prior_weight: float = 0.1,
        forgetting: float = 0.98,
    ) -> None:
        if not isinstance(priors, LatencyCoefficients):
            raise ValueError(
                f"LatencyModel: priors must be a LatencyCoefficients, got {type(priors).__name__}."
            )
        self.priors = priors
        self.prior_weight = _check("prior_weight", prior_weight, 0.0, above=True)
        self.forgetting = _check("forgetting", forgetting, 0.0, above=True)
        if self.forgetting > 1:
            raise ValueError(f"LatencyModel: forgetting must be <= 1, got {forgetting!r}.")
        self._prior = [
            priors.fixed_ms,
            priors.ms_per_token * _KILO,
            priors.ms_per_token_per_ktoken * _KILO,
            priors.ms_per_context_token * _KILO,
        ]
        self._gram = [[0.0] * _N for _ in range(_N)]  # Σ w · x xᵀ
        self._moment = [0.0] * _N  # Σ w · x y
        self._weight = 0.0  # Σ w: the evidence seen, in calls
        self._coefficients = list(self._prior)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        c = self.coefficients
        return (
            f"LatencyModel(fixed_ms={c.fixed_ms:.1f}, ms_per_token={c.ms_per_token:.4f}, "
            f"ms_per_token_per_ktoken={c.ms_per_token_per_ktoken:.5f}, "
            f"ms_per_context_token={c.ms_per_context_token:.5f}, "
            f"observations={self.observations:.1f})"
        )

    @property
    def coefficients(self) -> LatencyCoefficients:
        """The current fit (the priors before any observation)."""
        with self._lock:
            a, b, c, d = self._coefficients
        return LatencyCoefficients(a, b / _KILO, c / _KILO, d / _KILO)

    @property
    def observations(self) -> float:
        """The evidence behind the fit, in calls, older calls discounted by ``forgetting``."""
        with self._lock:
            return self._weight

    def observe(self, ttft_ms: float, prompt_tokens: int, cached_tokens: int | None) -> None:
        """Learns from one call.

        Args:
            ttft_ms: Its measured time to first token.
            prompt_tokens: The prompt tokens the server reported (or our count).
            cached_tokens: The prompt tokens the server reported as cached; ``None`` (not
                reported) is taken as 0.

        Raises:
            TypeError: When a value is not a number (a string, ``True``); the message names it.
            ValueError: When a value is impossible: negative, not finite, a time above a day
                (:data:`MAX_TTFT_MS`), more prompt tokens than any context window holds
                (``MAX_REPORTED_TOKENS``), or more cached than prompt tokens; the message names
                it. The model is then unchanged, and later observations are learned as before.
        """
        ttft = _check("ttft_ms", ttft_ms, 0.0)
        prompt = _check("prompt_tokens", prompt_tokens, 0.0)
        cached = 0.0 if cached_tokens is None else _check("cached_tokens", cached_tokens, 0.0)
        for name, value, most in (
            ("ttft_ms", ttft, MAX_TTFT_MS),
            ("prompt_tokens", prompt, MAX_REPORTED_TOKENS),
        ):
            if value > most:
                raise ValueError(
                    f"LatencyModel: {name} must be <= {most:,.0f}, got {value!r}: no call "
                    "takes that long or holds that many tokens; pass the server's usage "
                    "figures of one call."
                )
        if cached > prompt:
            raise ValueError(
                f"LatencyModel: cached_tokens ({cached_tokens}) exceeds prompt_tokens "
                f"({prompt_tokens}); pass the server's usage figures of one call."
            )
        x = self._features(prompt - cached, prompt)
        with self._lock:
            # The new state is built aside and kept only when its fit is finite.
            keep = self.forgetting
            moment = [keep * self._moment[i] + x[i] * ttft for i in range(_N)]
            gram = [[keep * self._gram[i][j] + x[i] * x[j] for j in range(_N)] for i in range(_N)]
            ridge = [
                [gram[i][j] + (self.prior_weight if i == j else 0.0) for j in range(_N)]
                for i in range(_N)
            ]
            target = [moment[i] + self.prior_weight * self._prior[i] for i in range(_N)]
            try:
                coefficients = _solve_non_negative(ridge, target)
            except ArithmeticError:
                coefficients = []
            if len(coefficients) != _N or not all(map(math.isfinite, coefficients)):
                raise ValueError(
                    f"LatencyModel: cannot learn from ttft_ms={ttft_ms!r}, "
                    f"prompt_tokens={prompt_tokens!r}, cached_tokens={cached_tokens!r}: the fit "
                    "with it is not finite; the model is unchanged."
                )
            self._moment, self._gram, self._coefficients = moment, gram, coefficients
            self._weight = keep * self._weight + 1.0

    def predict(self, uncached: float, context: float) -> float:
        """Returns the predicted time to first token in ms (never below 0).

        Args:
            uncached: Prompt tokens the server will prefill.
            context: Prompt tokens in all (what the prefilled ones attend over).
        """
        x = self._features(uncached, context)
        with self._lock:
            coefficients = self._coefficients
        return max(sum(w * v for w, v in zip(coefficients, x, strict=True)), 0.0)

    @staticmethod
    def _features(uncached: float, context: float) -> tuple[float, float, float, float]:
        k = uncached / _KILO
        return (1.0, k, k * context / _KILO, context / _KILO)


class LatencyModels:
    """One :class:`LatencyModel` per (server, model), the least recently used forgotten first.

    Args:
        max_endpoints: How many (endpoint, model) pairs to remember.
        priors: The priors of every new model.
    """

    def __init__(
        self, max_endpoints: int = 64, *, priors: LatencyCoefficients = DEFAULT_PRIORS
    ) -> None:
        self._models = LRUCache(
            checked_int("LatencyModels", "max_endpoints", max_endpoints, minimum=1)
        )
        self._priors = priors
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._models)

    def model_for(self, server: tuple[str, int] | None, model: str | None) -> LatencyModel:
        """Returns the latency model of ``model`` on ``server``.

        Args:
            server: The endpoint's (host, port), as the callback handler reports it
                (``server.address``, ``server.port``); ``None`` when unknown (OpenAI's default).
            model: The model name requested.
        """
        key: Hashable = (server, model or "")
        with self._lock:  # get-then-put must not create two models for one key
            found = self._models.get(key)
            if found is None:
                found = LatencyModel(self._priors)
                self._models.put(key, found)
        return found  # type: ignore[no-any-return]

    def model_for_base_url(self, base_url: str | None, model: str | None) -> LatencyModel:
        """Returns the latency model of ``model`` at ``base_url`` (``llm.base_url``; ``None``:
        OpenAI's default endpoint), keyed as the callback handler keys the calls it observes."""
        return self.model_for(host_and_port(base_url) if base_url else None, model)


LATENCY_MODELS: Final = LatencyModels()
"""The process-wide registry the callback handler feeds and ``doctor`` reads."""


# --- The fit bench and doctor print ---------------------------------------------------------


def describe_coefficients(coefficients: LatencyCoefficients) -> str:
    """The model as ``bench`` and ``doctor`` print it: ``"TTFT ≈ 203 ms + 160 ms per 1k
    prefilled tokens (+ 30.8 per 1k tokens of context)"``."""
    c = coefficients
    return (
        f"TTFT ≈ {c.fixed_ms:,.0f} ms + {c.ms_per_token * _KILO:,.0f} ms per 1k prefilled tokens "
        f"(+ {c.ms_per_token_per_ktoken * _KILO:,.1f} per 1k tokens of context)"
    )


@dataclass(frozen=True)
class PrefillFit:
    """The latency model fitted to calls with nothing cached (:func:`fit_prefill`), so the curve
    ``bench --plot`` draws is the model ``doctor`` prints.

    Attributes:
        coefficients: The fitted :class:`LatencyModel`'s coefficients.
    """

    coefficients: LatencyCoefficients

    def ttft_ms(self, tokens: float) -> float:
        """The fitted TTFT for a prompt of ``tokens`` tokens, none of them cached."""
        c = self.coefficients
        per_token = c.ms_per_token + c.ms_per_context_token
        return c.fixed_ms + per_token * tokens + c.ms_per_token_per_ktoken * tokens * tokens / _KILO

    def budget_under(self, ttft_ms: float) -> int | None:
        """Returns the most prompt tokens whose fitted TTFT stays under ``ttft_ms``.

        ``None`` means no limit (TTFT does not grow with the prompt); 0 means even an empty
        prompt is predicted to take longer.
        """
        c = self.coefficients
        linear = c.ms_per_token + c.ms_per_context_token
        quadratic = c.ms_per_token_per_ktoken / _KILO
        room = ttft_ms - c.fixed_ms
        if room <= 0:
            return 0 if linear > 0 or quadratic > 0 else None
        if quadratic > 0:  # the positive root of quadratic·t² + linear·t = room
            tokens = (math.sqrt(linear * linear + 4 * quadratic * room) - linear) / (2 * quadratic)
        elif linear > 0:
            tokens = room / linear
        else:
            return None
        return max(0, math.floor(tokens))

    def describe(self) -> str:
        """The fit as ``bench`` and ``doctor`` print it (:func:`describe_coefficients`); with
        nothing cached a prompt token's cost, cached or not, is part of its prefill cost."""
        c = self.coefficients
        return describe_coefficients(
            LatencyCoefficients(
                c.fixed_ms, c.ms_per_token + c.ms_per_context_token, c.ms_per_token_per_ktoken
            )
        )


def fit_prefill(samples: Iterable[tuple[float, float]]) -> PrefillFit | None:
    """Fits a :class:`LatencyModel` (from :data:`DEFAULT_PRIORS`) to calls with nothing cached.

    Args:
        samples: ``(prompt_tokens, ttft_ms)`` pairs; one :meth:`LatencyModel.observe` refuses
            (impossible figures) is left out.

    Returns:
        The fit, or ``None`` without two distinct prompt sizes to fit.
    """
    model = LatencyModel()
    sizes: set[float] = set()
    for tokens, ttft in samples:
        try:
            model.observe(ttft, tokens, 0)  # type: ignore[arg-type]  # floats are checked
        except (TypeError, ValueError):
            continue
        sizes.add(float(tokens))
    if len(sizes) < 2:
        return None
    return PrefillFit(model.coefficients)
