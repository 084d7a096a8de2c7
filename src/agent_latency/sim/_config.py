"""The simulator's options, validated when the configuration is built."""

from __future__ import annotations

from dataclasses import dataclass, fields

from agent_latency._validation import checked_bool, checked_int, checked_number
from agent_latency.config import LLMSettings

DEFAULT_MODEL = LLMSettings().model
"""The model the simulator serves by default: the one the default settings ask for."""


_OWNER = "SimulatorConfig"
USAGE_FORMATS = ("openai", "deepseek")
"""The shapes of ``usage`` the simulator can answer with."""


def _fail(option: str, value: object, rule: str) -> ValueError:
    return ValueError(f"{_OWNER}: {option} {rule}, got {value!r}.")


def _check_number(option: str, value: object, *, positive: bool = False) -> float:
    return checked_number(_OWNER, option, value, minimum=0, above=positive)


def _check_int(option: str, value: object, *, minimum: int | None = None) -> None:
    checked_int(_OWNER, option, value, minimum=minimum)


def _check_rate(option: str, value: object) -> None:
    checked_number(_OWNER, option, value, minimum=0, maximum=1, hint="a probability")


@dataclass(frozen=True, kw_only=True)
class SimulatorConfig:
    """How the simulated model server behaves.

    The latency model is described in :mod:`agent_latency.sim`. The defaults give an
    8,200-token agent prompt about 3.5 s to its first token and then 50 tokens per second, and
    a prefix cache like vLLM's on one 80 GB GPU.

    Attributes:
        overhead_ms: Fixed time every request spends before prefill (queueing, scheduling).
        prefill_ms_per_token: Prefill cost of each prompt token not found in the prefix cache,
            before attention over the context.
        attention_ms_per_1k_context: What each such token costs more per 1,000 tokens of
            context it attends over (the whole prompt): prefill slows down as context grows.
        decode_tokens_per_s: Output rate once the first token is out.
        answer_tokens: Length of an answer; a request's ``max_tokens`` or
            ``max_completion_tokens`` caps it (``finish_reason`` is then ``"length"``).
        context_window: The model's context window in tokens: a request whose prompt plus
            ``max_tokens`` exceeds it gets OpenAI's 400 ``context_length_exceeded``
            (``None``: no limit).
        window_holds_max_tokens: Whether ``max_tokens`` must fit in the window beside the
            prompt, as OpenAI, vLLM and DeepSeek require; ``False``: only the prompt must fit
            and the answer stops where the window fills, as llama.cpp does.
        tokenizer: The tokenizer that counts prompt tokens: a known name (``"cl100k"``,
            ``"o200k"``, ``"qwen"``, ``"llama3"``) or a model name; ``None``: the served model's
            own (the first of ``model``), as its server would count (:attr:`prompt_tokenizer`).
        prefix_cache: Reuse the longest token prefix shared with a cached prompt, as vLLM and
            llama.cpp do. A request may also opt out with ``"cache_prompt": false``.
        cache_tokens: Capacity of the prefix cache in tokens, shared by all conversations; the
            least recently used blocks are evicted first.
        cache_block_tokens: The cache's unit: only whole blocks of this many tokens are reused
            (vLLM: 16; OpenAI: 128; 1 reuses any shared prefix, as SGLang does).
        cache_min_tokens: A cached prefix shorter than this is not reused (OpenAI: 1,024).
        cache_slots: Per-slot caches as llama.cpp's server keeps them (``--parallel``): each of
            this many slots holds the last prompt it served, a prompt goes to the slot sharing
            most of it or else the least recently used one, so more conversations than slots
            evict each other (``None``: one block cache shared by all, as vLLM's).
        cache_lifetime_s: Idle time after which a cached block expires (``None``: never, as in
            vLLM; OpenAI keeps a prefix 5 to 10 minutes).
        timings: Send llama.cpp's ``timings`` object with each answer (llama-server does;
            OpenAI, DeepSeek and vLLM do not).
        usage_format: ``"openai"`` (``prompt_tokens_details.cached_tokens``) or ``"deepseek"``
            (also ``prompt_cache_hit_tokens`` and ``prompt_cache_miss_tokens``).
        api_key: When set, requests must send ``Authorization: Bearer <api_key>``. Masked in
            the repr.
        model: The model name, or names, served; requests for another model get a 404.
        error_rate: Probability that a chat request fails with a 500 error.
        rate_limit_rate: Probability that a chat request is refused with 429 and Retry-After.
        retry_after_s: The Retry-After value of those 429 answers, in seconds.
        seed: Seed of the random draws behind ``error_rate`` and ``rate_limit_rate``.
        stall_after_chunks: Pause once after this many output chunks (``None``: never).
        stall_ms: Length of that pause.
        reset_after_chunks: Drop the connection after this many streamed output chunks
            (``None``: never), as a crashing server or proxy does.
        buffered: Hold every streamed chunk until the answer is complete, as a buffering proxy
            does: streaming is on, yet the first token arrives with the last.
        max_body_bytes: Largest request body accepted; larger ones get a 413.
        header_timeout_s: A client that has not sent a whole request (request line, headers and
            body) this long after connecting or after its previous answer gets a 408 and is
            disconnected; the time to answer a complete request is not counted.
    """

    overhead_ms: float = 200.0
    prefill_ms_per_token: float = 0.16
    attention_ms_per_1k_context: float = 0.03
    decode_tokens_per_s: float = 50.0
    answer_tokens: int = 64
    context_window: int | None = None
    window_holds_max_tokens: bool = True
    tokenizer: str | None = None
    prefix_cache: bool = True
    cache_tokens: int = 100_000
    cache_block_tokens: int = 16
    cache_min_tokens: int = 0
    cache_slots: int | None = None
    cache_lifetime_s: float | None = None
    timings: bool = True
    usage_format: str = "openai"
    api_key: str | None = None
    model: str | tuple[str, ...] = DEFAULT_MODEL
    error_rate: float = 0.0
    rate_limit_rate: float = 0.0
    retry_after_s: float = 1.0
    seed: int = 0
    stall_after_chunks: int | None = None
    stall_ms: float = 1000.0
    reset_after_chunks: int | None = None
    buffered: bool = False
    max_body_bytes: int = 8 * 1024 * 1024
    header_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        _check_number("overhead_ms", self.overhead_ms)
        _check_number("prefill_ms_per_token", self.prefill_ms_per_token)
        _check_number("attention_ms_per_1k_context", self.attention_ms_per_1k_context)
        _check_number("decode_tokens_per_s", self.decode_tokens_per_s, positive=True)
        _check_int("answer_tokens", self.answer_tokens, minimum=1)
        if self.context_window is not None:
            _check_int("context_window", self.context_window, minimum=1)
        if self.tokenizer is not None and (
            not isinstance(self.tokenizer, str) or not self.tokenizer.strip()
        ):
            raise _fail("tokenizer", self.tokenizer, "must be a tokenizer or model name, or None")
        _check_int("cache_block_tokens", self.cache_block_tokens, minimum=1)
        _check_int("cache_tokens", self.cache_tokens, minimum=self.cache_block_tokens)
        _check_int("cache_min_tokens", self.cache_min_tokens, minimum=0)
        if self.cache_slots is not None:
            _check_int("cache_slots", self.cache_slots, minimum=1)
        if self.usage_format not in USAGE_FORMATS:
            raise _fail("usage_format", self.usage_format, f"must be one of {USAGE_FORMATS}")
        if self.cache_lifetime_s is not None:
            _check_number("cache_lifetime_s", self.cache_lifetime_s, positive=True)
        _check_rate("error_rate", self.error_rate)
        _check_rate("rate_limit_rate", self.rate_limit_rate)
        _check_number("retry_after_s", self.retry_after_s)
        _check_int("seed", self.seed)
        _check_number("stall_ms", self.stall_ms)
        _check_int("max_body_bytes", self.max_body_bytes, minimum=1)
        _check_number("header_timeout_s", self.header_timeout_s, positive=True)
        for option in ("stall_after_chunks", "reset_after_chunks"):
            if getattr(self, option) is not None:
                _check_int(option, getattr(self, option), minimum=1)
        for option in ("prefix_cache", "buffered", "timings"):
            checked_bool(_OWNER, option, getattr(self, option))
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key):
            # Never echo a key-like value back, even a malformed one.
            raise ValueError("SimulatorConfig: api_key must be a non-empty string or None.")
        if isinstance(self.model, list):
            object.__setattr__(self, "model", tuple(self.model))
        names = self.models
        if (
            not isinstance(names, tuple)
            or not names
            or not all(isinstance(name, str) and name.strip() for name in names)
        ):
            raise _fail("model", self.model, "must be a non-empty name or a tuple of names")

    def prefill_ms(self, uncached_tokens: float, prompt_tokens: float) -> float:
        """Returns the prefill time of a prompt, in ms, by the latency model.

        Args:
            uncached_tokens: Prompt tokens the prefix cache does not hold.
            prompt_tokens: The whole prompt: the context each of them attends over.
        """
        per_token = self.prefill_ms_per_token
        per_token += self.attention_ms_per_1k_context * prompt_tokens / 1000
        return per_token * uncached_tokens

    def ttft_ms(self, uncached_tokens: float, prompt_tokens: float) -> float:
        """Returns the time to first token of a prompt, in ms: the overhead, then its prefill.

        Args:
            uncached_tokens: Prompt tokens the prefix cache does not hold.
            prompt_tokens: The whole prompt: the context each of them attends over.
        """
        return self.overhead_ms + self.prefill_ms(uncached_tokens, prompt_tokens)

    @property
    def prompt_tokenizer(self) -> str:
        """The tokenizer that counts prompt tokens: ``tokenizer``, else the served model's name."""
        return self.tokenizer if self.tokenizer is not None else self.models[0]

    @property
    def models(self) -> tuple[str, ...]:
        """The names of the models served."""
        return (self.model,) if isinstance(self.model, str) else self.model

    def __repr__(self) -> str:
        def shown(name: str) -> str:
            value = getattr(self, name)
            return "'***'" if name == "api_key" and value is not None else repr(value)

        options = ", ".join(f"{option.name}={shown(option.name)}" for option in fields(self))
        return f"SimulatorConfig({options})"
