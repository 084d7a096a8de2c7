"""What a trim returns: the messages to send, the figures of the whole request, and the reasons."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Final

from langchain_core.messages import BaseMessage
from opentelemetry.util.types import AttributeValue

from agent_latency import semconv
from agent_latency._chat_format import role_of, wire_message
from agent_latency._trace_link import TRIM_FIELDS
from agent_latency.config import PRIORITY_CLASSES, PriorityClass
from agent_latency.tokens import PromptCalibration
from agent_latency.trimming._decisions import MessageDecision
from agent_latency.trimming._relevance import text_of
from agent_latency.trimming._shortening import split_content

logger = logging.getLogger("agent_latency.trimming")

_FIXED_PARTS: Final = (
    ("tool_tokens", "tool definitions", "send fewer tools or shorten their descriptions"),
    ("response_format_tokens", "the response format schema", "use a smaller response schema"),
    ("system_tokens", "system messages", "shorten the system prompt"),
    ("latest_user_tokens", "the latest user message", "shorten the question"),
    # After a tool result: the tool's image, or the user's next question (by position the same).
    ("added_user_tokens", "user messages with images", "send smaller images or less text"),
    ("tool_call_tokens", "the current tool call", "make the tool return less"),
    ("framing_tokens", "request framing", ""),
)
"""The parts of a request that no trim removes: (field, name, how to make it smaller when its
text takes most of it: the question's, the tool's results)."""
_BULK_HINTS: Final = {
    "images": "send smaller or fewer images with the question (they take most of it)",
    "arguments": "have the model write its tool-call arguments in smaller parts (they take most "
    "of the call)",
    "text": "have the model write less beside its tool calls (its text takes most of the call)",
}
"""How to make the question or the current tool call smaller when what takes most of it is not
its text or the tool's results, but the question's images, the call's arguments or the text the
model wrote beside the call: no shorter question or tool result can help then."""
_BYTES_PER_TOKEN: Final = 4
"""About how many bytes of text a token holds (English; fewer for other scripts): what an image
leaves of its message's tokens is the image."""


@dataclass(frozen=True, slots=True)
class ClassFigures:
    """What a trim did to one priority class.

    Attributes:
        messages: Input messages in the class.
        tokens_before: Their tokens in the input.
        tokens_after: Their tokens in the output.
        dropped_messages: How many were dropped.
        dropped_tokens: The tokens those had.
        shortened_messages: How many were shortened.
        shortened_tokens: Tokens removed by shortening.
    """

    messages: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    dropped_messages: int = 0
    dropped_tokens: int = 0
    shortened_messages: int = 0
    shortened_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class TrimResult:
    """The outcome of one trim.

    Token counts are raw counts of the trimmer's :class:`TokenCounter` and describe the whole
    request: the messages (with their framing), the tool definitions, the response format schema
    and the per-request framing. The repr leaves out message content. ``decisions``, ``by_class``
    and ``question_retention`` are worked out on first access, so a trim in an agent loop does
    not pay for them (nor for the span's attributes, when its span records nothing).

    Attributes:
        messages: The messages to send, in input order but for recalled history (sent right
            before the latest user message) and late tool results (sent right after their
            call): ``decisions`` say ``recalled`` and ``late_tool_result``. Kept messages are
            the input objects themselves; shortened ones are new copies.
        tokens_before: Tokens of the request with the input messages.
        tokens_after: Tokens of the request with ``messages``; at most ``effective_budget``
            unless ``over_budget``.
        budget: The prompt token budget, in the server's tokens.
        effective_budget: The budget in the counter's tokens: ``budget`` divided by
            ``calibration_factor``, rounded down.
        calibration_factor: The server's tokens per token of ours the trim assumed (1.0
            without calibration or before it has learned).
        dropped_messages: How many input messages are not in ``messages``.
        shortened_messages: How many messages were sent shortened.
        moved_messages: How many tool results were sent right after their call rather than
            where they were given (late: other messages came between).
        over_budget: Whether the request sent exceeds ``effective_budget``: the fixed part
            alone does not fit (the latest user message is then sent whole);
            :attr:`over_budget_cause` says what it is made of.
        elapsed_ms: How long the trim took.
        tool_tokens: Tokens of the tool definitions sent (structured-output tools included).
        response_format_tokens: Tokens of the ``response_format`` schema sent.
        framing_tokens: Tokens of the per-request framing (the reply priming).
        must_keep_tokens: Tokens of the must-keep messages as sent: system messages, the latest
            user message and the current tool call with its results.
        calibration: The calibration whose factor set ``effective_budget``, for the callback
            handler to feed the server's count back into; ``None`` without calibration.
        model: The name of the model the trim was made for: its calibration's
            (``PromptCalibration.model``), else, where its caller says, the agent's own
            (``TrimmingMiddleware``): the callback handler feeds the calibration only the count
            of a call to that model, not a fallback's.
        tools: With a ``tool_budget``: the tools to send (the request's own objects, in its
            order); ``None`` otherwise.
        schema_count: How many schemas the request sends besides its messages: one per tool
            definition (structured-output tools included) and one for a response format. The
            callback handler checks that the call sent as many (an agent's structured output
            counted as a tool may go as a response format: the same count).
        dropped_tools: With a ``tool_budget``: the names of the tools left out.
        message_tokens: Each input message's tokens (its framing included), in input order.
        sent_message_tokens: Each sent message's tokens as sent, in the order of ``messages``.
    """

    messages: list[BaseMessage] = field(repr=False)
    tokens_before: int
    tokens_after: int
    budget: int
    effective_budget: int
    calibration_factor: float
    dropped_messages: int
    shortened_messages: int
    moved_messages: int = 0
    over_budget: bool
    elapsed_ms: float
    tool_tokens: int
    response_format_tokens: int
    framing_tokens: int
    must_keep_tokens: int
    calibration: PromptCalibration | None = field(default=None, repr=False, compare=False)
    model: str | None = field(default=None, repr=False, compare=False)
    tools: tuple[object, ...] | None = field(default=None, repr=False, compare=False)
    schema_count: int = 0
    dropped_tools: tuple[str, ...] = ()
    message_tokens: tuple[int, ...] = field(repr=False, compare=False)
    sent_message_tokens: tuple[int, ...] = field(repr=False, compare=False)
    # Tokens of the must-keep messages as sent, per class: what the fixed part is made of.
    _must_keep_by_class: Mapping[PriorityClass, int] = field(repr=False, compare=False)
    # Of those, the user messages with images after a tool result (Plan.must_keep_added).
    _added_tokens: int = field(default=0, repr=False, compare=False)
    # Work the decisions and the retention out on first access (a trim in an agent loop rarely
    # reads them).
    _decide: Callable[[], tuple[MessageDecision, ...]] = field(repr=False, compare=False)
    _retain: Callable[[], float | None] = field(repr=False, compare=False)
    # What the decisions say of the messages not sent as given, worked out without them (an
    # agent's middleware asks on every call): their positions, and whether a cut is among them.
    _left_out: Callable[[], tuple[int, ...]] = field(repr=False, compare=False)
    _cut: Callable[[], bool] = field(repr=False, compare=False)
    # Whether the latest user message is sent as it was given (over budget: it is, see _plan).
    _question_whole: bool = field(default=True, repr=False, compare=False)

    @property
    def changed(self) -> bool:
        """Whether ``messages`` differ from the input: messages dropped, shortened, or late tool
        results sent right after their call."""
        return self.dropped_messages > 0 or self.shortened_messages > 0 or self.moved_messages > 0

    @property
    def fixed_tokens(self) -> int:
        """Tokens no trim can remove: tools, response format, framing and must-keep messages."""
        return (
            self.tool_tokens
            + self.response_format_tokens
            + self.framing_tokens
            + self.must_keep_tokens
        )

    @property
    def over_budget_cause(self) -> str | None:
        """What the fixed part is made of, largest first, when ``over_budget``; else ``None``.

        E.g. ``"tool definitions: 9,091 of 9,521 tokens; system messages: 310"``.
        """
        if not self.over_budget:
            return None
        parts = self._fixed_parts() or [("", "", "the request", self.tokens_after)]
        (_, _, name, tokens), *rest = parts
        return "; ".join(
            [f"{name}: {tokens:,} of {self.tokens_after:,} tokens"]
            + [f"{other}: {count:,}" for _, _, other, count in rest]
        )

    @property
    def over_budget_reason(self) -> str | None:
        """Why the request is over budget, in one word, when it is: ``"fixed_part"`` (what no
        trim removes does not fit, the one reason); ``None`` within the budget."""
        if not self.over_budget:
            return None
        return semconv.OVER_BUDGET_FIXED_PART

    @property
    def over_budget_hint(self) -> str | None:
        """How to make the largest part of the fixed part smaller, when ``over_budget``."""
        if not self.over_budget:
            return None
        parts = self._fixed_parts()
        key, hint = parts[0][:2] if parts else ("", "")
        if bulk := self._bulk(key):
            hint = _BULK_HINTS[bulk]
        return f"{hint}, or raise the budget" if hint else "raise the budget"

    def _bulk(self, key: str) -> str | None:
        """What takes most of the part ``key`` (of :data:`_FIXED_PARTS`) when it is not what its
        hint shortens: the question's ``"images"``, the current tool call's ``"arguments"`` or
        the model's ``"text"`` beside it; else ``None``.

        Read from the messages sent, which are the must-keep ones (over budget, every other one
        is dropped). A message's tokens are split between its text and its calls' arguments by
        their bytes; a question's images are what its text, at :data:`_BYTES_PER_TOKEN`, leaves
        of its tokens.
        """
        if key == "latest_user_tokens":
            question = self._sent_question()
            texts, others = split_content(question.content if question else "")
            text = sum(map(_bytes, texts)) / _BYTES_PER_TOKEN
            images = self._must_keep_by_class["latest_user"] - text
            return "images" if others and images > text else None
        if key != "tool_call_tokens":
            return None
        results = arguments = said = 0.0
        for message, tokens in zip(self.messages, self.sent_message_tokens, strict=True):
            if role_of(message) == "tool":
                results += tokens
            elif role_of(message) == "assistant":
                text = _bytes(text_of(message))
                calls = wire_message(message).get("tool_calls", ())
                passed = sum(_bytes(call["function"]["arguments"]) for call in calls)
                arguments += tokens * passed / ((text + passed) or 1)
                said += tokens * text / ((text + passed) or 1)
        if max(arguments, said) <= results:
            return None
        return "arguments" if arguments >= said else "text"

    def _sent_question(self) -> BaseMessage | None:
        """The latest user message as sent: a trim moves only tool results and recalled rounds
        (sent before it), so as many user messages are sent before it as were kept before it."""
        decisions = self.decisions
        latest = next((d.index for d in decisions if d.priority_class == "latest_user"), None)
        if latest is None:
            return None
        kept = [d for d in decisions[:latest] if d.role == "user" and d.action != "dropped"]
        users = [message for message in self.messages if role_of(message) == "user"]
        return users[len(kept)] if len(kept) < len(users) else None

    def _fixed_parts(self) -> list[tuple[str, str, str, int]]:
        """The non-empty parts of the fixed part as (field, hint, name, tokens), largest
        first."""
        must_keep, added = self._must_keep_by_class, self._added_tokens
        sizes = {
            "tool_tokens": self.tool_tokens,
            "response_format_tokens": self.response_format_tokens,
            "framing_tokens": self.framing_tokens,
            "system_tokens": must_keep["system"],
            "latest_user_tokens": must_keep["latest_user"],
            "added_user_tokens": added,
            "tool_call_tokens": must_keep["tool_result"] + must_keep["history"] - added,
        }
        names = {key: name for key, name, _ in _FIXED_PARTS}
        if self._question_whole:
            names["latest_user_tokens"] += " (sent whole)"
        parts = [(key, hint, names[key], sizes[key]) for key, _, hint in _FIXED_PARTS if sizes[key]]
        return sorted(parts, key=lambda part: -part[3])

    @cached_property
    def question_retention(self) -> float | None:
        """A proxy for what the trim cost the answer: of the question's terms (the latest user
        message's, with those of the user messages a tool added after it) that occur elsewhere
        in the input, the share still in what is sent (1.0 when nothing was left out); ``None``
        without such terms."""
        return self._retain()

    @cached_property
    def decisions(self) -> tuple[MessageDecision, ...]:
        """One decision per input message, in input order."""
        return self._decide()

    @cached_property
    def left_out_indices(self) -> tuple[int, ...]:
        """The input positions of the messages dropped or shortened, ascending: those whose
        :attr:`decisions` do not say ``kept``, found without building every decision."""
        return self._left_out()

    @cached_property
    def cut_for_budget(self) -> bool:
        """Whether messages were dropped for the budget: by another rule than those of gaps in
        the tool calls (orphan results, unanswered calls), which go whatever the budget."""
        return self._cut()

    @cached_property
    def by_class(self) -> Mapping[PriorityClass, ClassFigures]:
        """Figures per priority class, for every class, highest default priority first."""
        members: dict[PriorityClass, list[MessageDecision]] = {c: [] for c in PRIORITY_CLASSES}
        for decision in self.decisions:
            members[decision.priority_class].append(decision)
        return {c: _figures(decisions) for c, decisions in members.items()}

    def span_attributes(self) -> dict[str, AttributeValue]:
        """Returns the ``agent_latency.trim.*`` attributes describing this trim."""
        attributes: dict[str, AttributeValue] = {
            attribute: getattr(self, name) for name, attribute in TRIM_FIELDS.items()
        }
        if self.calibration is not None:
            attributes[semconv.TRIM_CALIBRATION_FACTOR] = self.calibration_factor
        if self.question_retention is not None:
            attributes[semconv.TRIM_QUESTION_RETENTION] = self.question_retention
        if self.dropped_tools:
            attributes[semconv.TRIM_DROPPED_TOOLS] = list(self.dropped_tools)
        cause, reason = self.over_budget_cause, self.over_budget_reason
        if cause is not None and reason is not None:
            attributes[semconv.TRIM_OVER_BUDGET_CAUSE] = cause
            attributes[semconv.TRIM_OVER_BUDGET_REASON] = reason
        return attributes


def warn_if_over_budget(result: TrimResult) -> None:
    """Logs the warning docs/trimming.md quotes when ``result`` is ``over_budget``: what the
    request needs against its ``budget`` (the one the user set), what no trim removes and the
    fix. A trimmer whose result another reports (the recall marker's reserve) does not call it."""
    if result.over_budget:
        logger.warning(
            "Prompt over budget after trimming: the request needs %d tokens, the budget is %d "
            "(%d by our count). What no trim removes: %s. Fix: %s.",
            result.tokens_after,
            result.budget,
            result.effective_budget,
            result.over_budget_cause,
            result.over_budget_hint,
        )


def _bytes(text: str) -> int:
    """The bytes of ``text`` in UTF-8 (a lone surrogate as it is sent)."""
    return len(text.encode(errors="surrogatepass"))


def _figures(decisions: list[MessageDecision]) -> ClassFigures:
    dropped = [d for d in decisions if d.action == "dropped"]
    shortened = [d for d in decisions if d.action == "shortened"]
    return ClassFigures(
        messages=len(decisions),
        tokens_before=sum(d.tokens for d in decisions),
        tokens_after=sum(d.tokens_after for d in decisions),
        dropped_messages=len(dropped),
        dropped_tokens=sum(d.tokens for d in dropped),
        shortened_messages=len(shortened),
        shortened_tokens=sum(d.tokens - d.tokens_after for d in shortened),
    )
