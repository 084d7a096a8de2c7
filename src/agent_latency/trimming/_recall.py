"""Nothing lost for good in agents: a marker where history was cut, and a search to read it back.

:class:`RecallingTrimmer` trims like the trimmer it wraps, to the budget less the tokens of the
elision marker (:data:`MARKER_TEXT`), and, when the trim dropped messages for the budget (not
only orphan results and unanswered calls), sends the marker right after the leading system
messages: as a system message of its own, or, where the counter's chat template takes one
system message (``folds_system``: Gemma's, which refuses a second), at the head of the first
message after them, a copy of that user message (else as a user turn of its own before it).
The marker's text is a constant and its place does not move, so from the first cut on it is
part of the stable prompt prefix a server caches: it never moves the prefix by itself.
Reserving its tokens up front (rather than trimming again when it does not fit) keeps one trim
per call and the same cut decisions on every call of a conversation.

What was left out (dropped or shortened) is read back by :meth:`RecallingTrimmer.read`: the
messages whose ids are asked for, or those that best match the words asked for (Okapi BM25, the
newer first on a tie, a correction before what it corrects), within the tool-result cap the
trimmer applies to the answer when it sends it (``max_tool_result_tokens``, by default a quarter
of the budget), the answer's message counted as sent: its framing and the call's id included.
The agents' ``recall`` tool (:data:`TOOL_NAME`) calls it; ``TrimmingMiddleware`` and the
pre-model hook register it.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NoOpTracer, Tracer

from agent_latency import semconv
from agent_latency._chat_format import role_of
from agent_latency._user_input import coerce_messages
from agent_latency.tokens import TokenCounting
from agent_latency.trimming._options import TrimOptions
from agent_latency.trimming._relevance import TermCache, bm25_scores, text_of
from agent_latency.trimming._request import returning_directly
from agent_latency.trimming._result import TrimResult, warn_if_over_budget
from agent_latency.trimming._rounds import analysis
from agent_latency.trimming._shortening import split_content
from agent_latency.trimming._span import TrimRunnable, end_trim_span, start_trim_span

__all__ = [
    "MARKER_TEXT",
    "PLAIN_MARKER_TEXT",
    "TOOL_DEFINITION",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "RecallingTrimmer",
    "Trimming",
    "calling_message",
    "in_runs",
    "left_out_of",
    "left_out_runs",
]

TOOL_NAME: Final = "recall"
_PART_NAMES: Final = {
    "image_url": "image",
    "image": "image",
    "input_audio": "audio",
    "audio": "audio",
    "file": "file",
}
"""The names of content parts other than text the recall tool reads back (OpenAI's part types
and LangChain's standard ones)."""
MARKER_TEXT: Final = (
    "[Earlier messages of this conversation were left out of this prompt to keep it short. "
    f"Nothing is lost: call the `{TOOL_NAME}` tool with words of what you need to read them back.]"
)
"""The elision marker: the same text on every call, so it never moves the cached prefix."""
PLAIN_MARKER_TEXT: Final = (
    "[Earlier messages of this conversation were left out of this prompt to keep it short.]"
)
"""The marker where the model has no ``recall`` tool: it does not invite a call it cannot make."""
TOOL_DESCRIPTION: Final = (
    "Reads back messages left out of your prompt: give words of what you need, or message ids."
)
TOOL_DEFINITION: Final = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": TOOL_DESCRIPTION,
        "parameters": {
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "type": "object",
        },
    },
}
"""The recall tool as the server gets it (what a pre-model hook counts; the same as
``TrimmingMiddleware``'s tool converts to)."""
_MARKER_GAP: Final = "\n\n"
"""What separates the marker from the user's text where it heads the first user message."""
_UNKNOWN_CALL_ID: Final = "5e0b9c1f-7a3d-4c2e-9f8b-d61a04e7b3c9"
"""The call id an answer is sized for when its own is not given: a random UUID's (as LangChain
makes for some providers), as many tokens as OpenAI's ``call_...`` and Anthropic's ``toolu_...``
or more."""
_LISTED: Final = 50
"""How many ids of the matches not shown the tool names."""
_ID_START: Final = re.compile(r"(?<![\w-])(?<!\w\.)")
_ID_END: Final = re.compile(r"(?![\w-]|\.\w)")
# An id that says it is one: letters and digits both (a UUID, "h12"), or long.
_ID_LIKE: Final = re.compile(r"(?=.*[^\W\d_])(?=.*\d)|.{16}")
# What a query made of ids only holds besides them: punctuation, and "id", "ids", "and".
_PROSE: Final = re.compile(r"[\W_]+|\b(?:ids?|and)\b", re.IGNORECASE)
"""Where a message id the query names may start and end: not inside a word, an id (letters,
digits, ``_`` and ``-``) or a number (``h1.5`` names no ``h1``)."""


class Trimming(Protocol):
    """What :class:`RecallingTrimmer` uses of a ``PriorityTrimmer``."""

    options: TrimOptions
    term_cache: TermCache

    @property
    def token_counter(self) -> TokenCounting: ...

    @property
    def trim(self) -> Callable[..., TrimResult]: ...

    def _with(self, *, cut_budget: int | None = None, **changes: Any) -> Trimming: ...


class RecallingTrimmer(TrimRunnable):
    """Trims like ``trimmer`` and marks the cut; reads back what it left out (module docstring).

    A LangChain ``Runnable`` (the pre-model hook invokes it) whose :meth:`trim` takes the
    arguments of ``PriorityTrimmer.trim``; its result describes the request sent, the marker
    included, against the whole budget (where the marker heads a user message, that message
    is sent as a copy, the input left as it is).

    Args:
        trimmer: The ``PriorityTrimmer`` to trim with.
        offers_tool: Whether the model has the ``recall`` tool: the marker then invites it to
            call it (:data:`MARKER_TEXT`), else it only says that messages were left out
            (:data:`PLAIN_MARKER_TEXT`).

    Attributes:
        folds: Whether the counter's chat template folds the system message into the first
            user turn (``folds_system``): the marker then heads the first user message sent.
        marker: The marker as a message of its own: a system message, or where ``folds`` a
            user one (sent where the first message after the system ones is not the user's).
        marker_tokens: The tokens reserved for the marker: the most it adds where it is sent
            (where ``folds``: the larger of its text and the blank line after it, heading a user
            message, and a user message of its own).
    """

    def __init__(self, trimmer: Trimming, *, offers_tool: bool = True) -> None:
        self.trimmer = trimmer
        self.offers_tool = offers_tool
        text = MARKER_TEXT if offers_tool else PLAIN_MARKER_TEXT
        counter = trimmer.token_counter
        # A template that takes one system message refuses the marker as a second one.
        self.folds = bool(getattr(counter, "folds_system", False))
        self.marker: BaseMessage = HumanMessage(text) if self.folds else SystemMessage(text)
        self._marker_size = counter.count_message(self.marker)
        # Where it folds, which form is sent is known only after the trim: the reserve is the
        # larger, so that the marker always fits (a user turn of its own costs its framing).
        self.marker_tokens = (
            max(counter.count_text(text + _MARKER_GAP), self._marker_size)
            if self.folds
            else self._marker_size
        )
        self._reserved: tuple[int, Trimming] | None = None
        self._unreserved: Trimming | None = None
        self._tracer = trace.get_tracer(
            semconv.INSTRUMENTATION_SCOPE,
            tracer_provider=trimmer.options.tracer_provider,
            schema_url=semconv.SCHEMA_URL,
        )

    def __repr__(self) -> str:
        tool = "" if self.offers_tool else ", offers_tool=False"
        return f"RecallingTrimmer({self.trimmer!r}{tool})"

    def trim(
        self,
        messages: object,
        *,
        context: Context | None = None,
        tracer: Tracer | None = None,
        model: str | None = None,
        **request: Any,
    ) -> TrimResult:
        """Trims ``messages`` as ``PriorityTrimmer.trim`` does, the marker in, recording a span
        and warning when the request sent is over the whole budget.

        Args:
            messages: As for ``PriorityTrimmer.trim``. Never modified.
            context: The OpenTelemetry context to start the span in.
            tracer: The tracer to record the trim span with. Default: the trimmer's own.
            model: The model the trim is made for (``TrimResult.model``), if known.
            **request: ``tools``, ``response_format``, ``strict_tools``, ``output_tools``.
        """
        span = start_trim_span(tracer or self._tracer, context)
        try:
            result = self._marked(self._quiet_trim(messages, request), model)
        except BaseException as exc:
            end_trim_span(span, exc)
            raise
        end_trim_span(span, None, result.span_attributes)  # asked for only when recording
        warn_if_over_budget(result)  # the request sent, against the whole budget
        return result

    def left_out(self, messages: Sequence[BaseMessage], **request: Any) -> list[BaseMessage]:
        """The messages a trim of ``messages`` drops or shortens (no span, no marker)."""
        return left_out_of(messages, self._quiet_trim(messages, request))

    def read(
        self,
        left_out: Sequence[BaseMessage],
        query: str,
        *,
        conversation: Sequence[BaseMessage] = (),
        tools: Sequence[object] | None = None,
        call_id: str | None = None,
    ) -> str:
        """What the recall tool answers: the left-out messages asked for, as text.

        Args:
            left_out: The messages a trim left out, in conversation order.
            query: Words of what is needed, or message ids (as the tool writes them,
                ``[id <id>]``, quoted, in a JSON list: see :func:`_named_ids`): the
                messages whose ids it names come first, in conversation order, then the best
                BM25 matches of its words, the newer first on a tie (and a message holding the
                same words of it as an older one ranks at least as high: a correction first).
            conversation: The messages ``left_out`` were left out of: a user message a tool
                added there with its result (an image it fetched) reads back as the tool's,
                not as the user's words.
            tools: The tools of the request ``left_out`` were left out of (whose
                ``return_direct`` flags tell a user's message after a result from one the tool
                added). Default: the trimmer's own.
            call_id: The id of the tool call the answer is for: the answer's message sends
                it, so it counts against the cap. Default: not known, counted as a random
                UUID (:data:`_UNKNOWN_CALL_ID`).

        Returns:
            The messages, each as ``[id <id>] <role>: <text>`` (a user message a tool added:
            ``[id <id>] added by a tool: <text>``), within the trimmer's tool-result cap as
            the answer's message is sent, so that the next call sends it whole (the best one,
            if it alone is longer, from the stretch of it that matches best, where its id line
            fits), and how many more matched, with their ids. The tool's own earlier calls and
            answers are not read (a model message that made one beside text or other calls
            reads as those).
        """
        # Its own earlier calls and answers hold the words of earlier queries, and what came
        # back then: not what was said.
        left_out = _without_recalls(left_out)
        if not left_out:
            return "Nothing was left out of this conversation's prompt."
        wanted = _named_ids(query, left_out)
        chosen = [m for m in left_out if m.id in wanted]
        texts = [_parts(m) + _text(m) for m in left_out]  # "image" finds an image
        scores = _newer_first(query, texts, self.trimmer.term_cache)
        ranked = sorted(
            (i for i, score in enumerate(scores) if score > 0),
            key=lambda i: (-scores[i], -i),
        )
        chosen += [left_out[i] for i in ranked if left_out[i] not in chosen]
        if not chosen:
            return (
                f"No left-out message matches {query!r}; {len(left_out)} messages were left out: "
                "ask with other words."
            )
        direct = returning_directly(self.trimmer.options.tools or () if tools is None else tools)
        counter = self.trimmer.token_counter
        added = {id(conversation[i]) for i in analysis(counter, conversation, direct).added}
        return self._within_limit(chosen, query, added, self._room(call_id))

    def _room(self, call_id: str | None) -> int:
        """The tokens the answer's text may take: the cap the trimmer applies to it as a tool
        result (:attr:`TrimOptions.tool_result_cap`, the one the reserving trimmer keeps) less
        what its message adds to it, as the call ``call_id`` gets it."""
        answer = ToolMessage(
            "", tool_call_id=_UNKNOWN_CALL_ID if call_id is None else call_id, name=TOOL_NAME
        )
        framing = self.trimmer.token_counter.count_message(answer)
        return max(self.trimmer.options.tool_result_cap - framing, 1)

    def _within_limit(
        self, chosen: list[BaseMessage], query: str, added: set[int], room: int
    ) -> str:
        """``chosen`` as text within ``room`` tokens, the note on the rest included.

        Half of it is kept for the note's ids (an agent's ids are UUIDs, some 25 tokens each),
        the rest reads messages back; the note's ids then take what the messages left.
        """
        counter = self.trimmer.token_counter
        # The note on the rest lists at most what this one on all the chosen takes.
        reserved = counter.count_text(_more(chosen, room // 2, counter))
        limit = room - reserved
        parts: list[str] = []
        used = 0
        for message in chosen:
            head = _head(message, added)
            part = head + _text(message)
            tokens = counter.count_text(part) + 1  # the line break
            if used + tokens > limit:
                if not parts:  # the best match alone is too long: send what matches of it
                    passage = _passage(message, head, query, limit - 8, counter) + " [cut]"
                    tokens = counter.count_text(passage) + 1
                    if tokens <= limit:  # not where its head alone is over
                        parts.append(passage)
                        used = tokens
                break
            parts.append(part)
            used += tokens
        rest = chosen[len(parts) :]
        # The note takes what the messages leave: at least what was reserved for it.
        return "\n".join([*parts, _more(rest, room - used, counter)] if rest else parts)

    def _quiet_trim(self, messages: object, request: dict[str, Any]) -> TrimResult:
        """The trim to the budget less the marker's tokens, with no span or warning of its own;
        to the whole budget where what no trim removes leaves no room for the marker (the trim
        within the reserve would shorten the question, or overflow, for a marker not sent)."""
        quiet = NoOpTracer()
        result = self._reserving().trim(messages, tracer=quiet, **request)
        if result.over_budget or (
            result.shortened_messages
            and any(d.rule == "shortened_to_fit" for d in result.decisions)
        ):
            result = self._whole().trim(messages, tracer=quiet, **request)
        return result

    def _whole(self) -> Trimming:
        """The trimmer at the whole budget, with no warning of its own (see :meth:`trim`)."""
        if self._unreserved is None:
            self._unreserved = self.trimmer._with(cut_budget=self.trimmer.options.budget)
        return self._unreserved

    def _reserving(self) -> Trimming:
        """The trimmer with the marker's tokens, in the server's tokens, taken off its budget.

        Its defaults that follow the budget (the tool-result cap, the prefix step) stay those
        of the whole budget, the step no larger than what is left (a budget hardly larger than
        the marker leaves less than a step); it is rebuilt only when the calibration moves the
        reserve.
        """
        base, options = self.trimmer, self.trimmer.options
        factor = options.calibration.factor if options.calibration is not None else 1.0
        reserve = math.ceil(self.marker_tokens * factor)
        reserved = self._reserved
        if reserved is None or reserved[0] != reserve:
            budget = max(options.budget - reserve, 1)
            trimmer = base._with(
                cut_budget=options.budget,  # cut where the whole budget's trimmer would
                budget=budget,
                max_tool_result_tokens=options.tool_result_cap,
                prefix_step_tokens=min(options.step_tokens, budget),
            )
            reserved = self._reserved = (reserve, trimmer)
        return reserved[1]

    def _marked(self, result: TrimResult, model: str | None) -> TrimResult:
        """``result`` against the whole budget, with the marker sent when history was left out
        for the budget and the request fits with it (a request that fits only without it goes
        without), made for ``model`` unless the trim names one already (its calibration's).
        Orphan results and unanswered calls, dropped whatever the budget, are no cut: the marker
        would tell the model of one that did not happen."""
        budget = self.trimmer.options.budget
        effective = math.floor(budget / result.calibration_factor)
        messages, tokens = result.messages, result.tokens_after
        sizes = result.sent_message_tokens
        if result.dropped_messages and result.cut_for_budget:
            marked, marked_sizes, added = self._with_marker(messages, sizes)
            if tokens + added <= effective:
                messages, sizes, tokens = marked, marked_sizes, tokens + added
        return dataclasses.replace(
            result,
            _decide=functools.partial(getattr, result, "decisions"),  # worked out once
            messages=messages,
            sent_message_tokens=sizes,
            tokens_after=tokens,
            budget=budget,
            effective_budget=effective,
            over_budget=tokens > effective,
            model=result.model or model,
        )

    def _with_marker(
        self, messages: list[BaseMessage], sizes: tuple[int, ...]
    ) -> tuple[list[BaseMessage], tuple[int, ...], int]:
        """``messages`` and their ``sizes`` with the marker after the leading system messages,
        and the tokens it adds. Where the template folds the system message into the first
        user turn (and refuses a second system message or a first turn not the user's), the
        marker heads a copy of the first message after them when that is a user message, and
        is a user turn of its own before it otherwise."""
        lead = next((i for i, m in enumerate(messages) if role_of(m) != "system"), len(messages))
        if self.folds and lead < len(messages) and role_of(messages[lead]) == "user":
            headed = _headed(messages[lead], str(self.marker.content))
            size = self.trimmer.token_counter.count_message(headed)  # what is really sent
            after = lead + 1
            return (
                [*messages[:lead], headed, *messages[after:]],
                (*sizes[:lead], size, *sizes[after:]),
                size - sizes[lead],
            )
        return (
            [*messages[:lead], self.marker, *messages[lead:]],
            (*sizes[:lead], self._marker_size, *sizes[lead:]),
            self._marker_size,
        )


def _headed(message: BaseMessage, marker: str) -> BaseMessage:
    """A copy of ``message`` whose content opens with ``marker`` and a blank line (list content:
    a text part of them first)."""
    content = message.content
    if isinstance(content, list):
        headed: str | list[str | dict[Any, Any]] = [
            {"type": "text", "text": marker + _MARKER_GAP},
            *content,
        ]
    else:
        headed = marker + _MARKER_GAP + (content or "")
    return message.model_copy(update={"content": headed})


def left_out_of(messages: object, result: TrimResult) -> list[BaseMessage]:
    """The input messages ``result`` dropped or shortened, in input order."""
    inputs = coerce_messages(messages)
    return [inputs[index] for index in result.left_out_indices]


def left_out_runs(messages: Sequence[BaseMessage], result: TrimResult) -> list[list[str]]:
    """The ids of the first and last message of each run of left-out messages.

    What an agent's model call left out, kept with its answer (a few ids, however long the
    run): the recall tool finds those messages in the agent's state by them. Runs whose ends
    have no id are left out.
    """
    ends: list[tuple[int, int]] = []  # each run's first and last position
    first = last = -2
    for position in result.left_out_indices:  # ascending: a gap ends a run
        if position != last + 1:
            if last >= 0:
                ends.append((first, last))
            first = position
        last = position
    if last >= 0:
        ends.append((first, last))
    runs = ([messages[first].id, messages[last].id] for first, last in ends)
    return [[start, end] for start, end in runs if start is not None and end is not None]


def in_runs(messages: Iterable[BaseMessage], runs: Sequence[Sequence[str]]) -> list[BaseMessage]:
    """The messages from each run's first id through its last (see :func:`left_out_runs`)."""
    starts = {run[0]: run[1] for run in runs if len(run) == 2}
    found: list[BaseMessage] = []
    end: str | None = None
    for message in messages:
        if end is None and message.id in starts:
            end = starts[message.id]
        if end is not None:
            found.append(message)
            if message.id == end:
                end = None
    return found


def calling_message(messages: Sequence[BaseMessage], call_id: str | None) -> int | None:
    """The index of the AI message that made the tool call ``call_id``, searched from the end."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, AIMessage) and any(
            call.get("id") == call_id for call in message.tool_calls
        ):
            return i
    return None


def _text(message: BaseMessage) -> str:
    """A message's text, with the calls of an AI message that made tool calls."""
    text = text_of(message)
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = "; ".join(
            f"called {c['name']}({json.dumps(c['args'], ensure_ascii=False)})"
            for c in message.tool_calls
        )
        return f"{text} ({calls})" if text else calls
    return text


def _parts(message: BaseMessage) -> str:
    """A message's parts other than text as the recall tool names them before its text (a chart
    a tool fetched reads as one, not as nothing; a long text cut to a passage keeps them):
    ``[image] ``, ``[audio] ``, ``[file] ``, else ``[<its type>] `` each; ``""`` for none."""
    return "".join(f"[{_part_name(part)}] " for part in split_content(message.content)[1])


def _part_name(part: Any) -> str:
    kind = part.get("type") if isinstance(part, Mapping) else None
    return _PART_NAMES.get(kind, kind) if isinstance(kind, str) else "part"


def _newer_first(query: str, texts: Sequence[str], terms: TermCache) -> list[float]:
    """The BM25 score of each text against ``query``, a text holding the same words of the
    query as an older one scoring at least as well: with the newer first on a tie, of two
    statements of a thing the later one (a correction) comes first, whichever is the shorter,
    as the cache-first cut ranks rounds."""
    scores = bm25_scores(query, [[text] for text in texts], terms)
    asked = terms.counts(query).keys()
    best: dict[frozenset[str], float] = {}
    for i, text in enumerate(texts):
        if scores[i] > 0:
            said = frozenset(asked & terms.counts(text).keys())
            scores[i] = best[said] = max(scores[i], best.get(said, 0.0))
    return scores


def _more(rest: Sequence[BaseMessage], within: int, counter: TokenCounting) -> str:
    """The note on the matches not shown, with the ids to ask for them by: the first
    :data:`_LISTED`, as many as keep the note within ``within`` tokens (if any)."""
    note = f"({len(rest)} more matched: ask with more precise words or by id.)"
    ids = [m.id for m in rest if m.id is not None]

    def listing(listed: int) -> str:
        more = ", …" if len(ids) > listed else ""
        return f"{note} Their ids: {', '.join(ids[:listed])}{more}" if listed else note

    low, high = 0, min(len(ids), _LISTED)  # the most ids that fit: at least low, at most high
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count_text(listing(middle)) <= within:
            low = middle
        else:
            high = middle - 1
    return listing(low)


def _without_recalls(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """``messages`` without the recall tool's calls and answers: an AI message that called it
    reads as a copy without those calls (its text and other calls kept), or not at all where
    nothing else is left of it."""
    calls = {
        call["id"]
        for m in messages
        if isinstance(m, AIMessage)
        for call in m.tool_calls
        if call["name"] == TOOL_NAME
    }
    kept: list[BaseMessage] = []
    for m in messages:
        if isinstance(m, ToolMessage) and (m.tool_call_id in calls or m.name == TOOL_NAME):
            continue
        if isinstance(m, AIMessage) and any(call["name"] == TOOL_NAME for call in m.tool_calls):
            m = _without_calls(m, calls)
            if not (_parts(m) or _text(m)):  # nothing else to read
                continue
        kept.append(m)
    return kept


def _without_calls(message: AIMessage, calls: set[str | None]) -> AIMessage:
    """A copy of ``message`` without its tool calls whose ids are in ``calls``, in its tool
    calls and in its content (an Anthropic-style ``tool_use`` part)."""
    content = message.content
    if isinstance(content, list):
        content = [
            part for part in content if not (isinstance(part, Mapping) and part.get("id") in calls)
        ]
    tool_calls = [call for call in message.tool_calls if call["id"] not in calls]
    return message.model_copy(update={"content": content, "tool_calls": tool_calls})


def _named_ids(query: str, messages: Sequence[BaseMessage]) -> set[str]:
    """The ids of ``messages`` that ``query`` names: each where it stands on its own, however
    it is written around (``h1``, ``[id h1]`` as the tool answers, quoted, in a JSON list, at
    the end of a sentence), not inside a longer word or id (``h12``, ``xh1``, ``h1-2``,
    ``h1.5`` name no ``h1``).

    The stretches of the query between where an id may start and where one may end are looked
    up, none longer than the longest id: as quick for thousands of ids as for one.
    """
    ids = {m.id for m in messages if m.id}
    if not ids:
        return set()
    longest = max(map(len, ids))
    ends = [end.start() for end in _ID_END.finditer(query)]  # ascending
    named = {
        query[start:end]
        for start in (match.start() for match in _ID_START.finditer(query))
        for end in ends[
            bisect.bisect_right(ends, start) : bisect.bisect_right(ends, start + longest)
        ]
        if query[start:end] in ids
    }
    # An id that is a plain number or word (a chat store's row numbers) is one in prose only
    # where the query says so ("[id 3]", "id 3"), or names nothing else.
    plain = {id_ for id_ in named if not _ID_LIKE.search(id_)}
    if plain and _PROSE.sub(" ", _without(query, named)).strip():
        said = {id_ for id_ in plain if re.search(rf"\bid\W*{re.escape(id_)}(?![\w-])", query)}
        named -= plain - said
    return named


def _without(query: str, ids: set[str]) -> str:
    """``query`` with the ``ids`` in it blanked out (the longest first)."""
    for id_ in sorted(ids, key=len, reverse=True):
        query = query.replace(id_, " ")
    return query


def _head(message: BaseMessage, added: set[int]) -> str:
    """What the recall tool writes before a message's text: its id, who said it (``added by a
    tool`` for a user message a tool added, whose id is in ``added``) and its other parts."""
    said = "added by a tool" if id(message) in added else message.type
    return f"[id {message.id}] {said}: {_parts(message)}"


def _passage(
    message: BaseMessage, head: str, query: str, tokens: int, counter: TokenCounting
) -> str:
    """``message`` as the recall tool writes it after ``head``, within about ``tokens`` tokens:
    from the stretch of its text that best matches ``query`` (BM25 over overlapping windows of
    half that, what is sent beginning a quarter of it before the best; the start when no stretch
    matches). A shortened tool result's start was sent: what a recall asks for of it is in the
    middle that was cut."""
    ids = counter.encode(_text(message))
    room = max(tokens - counter.count_text(head) - 2, 1)  # the lead, and a cut's retokenising
    width = max(room // 2, 1)
    last = max(len(ids) - width, 0)
    starts = [*range(0, last, max(width // 2, 1)), last]  # the last window ends with the text
    windows = [[counter.decode(ids[start : start + width])] for start in starts]
    scores = bm25_scores(query, windows, TermCache())  # not kept: the windows are this call's
    best = max(range(len(scores)), key=lambda w: (scores[w], -w))
    start = max(starts[best] - room // 4, 0) if scores[best] > 0 else 0
    # A cut inside a character decodes to U+FFFD: its part is left out.
    text = counter.decode(ids[start : start + room]).strip("\ufffd")
    return head + ("… " if start else "") + text
