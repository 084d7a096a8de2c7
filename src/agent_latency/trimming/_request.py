"""What a request sends besides its messages: tool definitions and a response format schema.

The trimmer counts them against the budget as they go on the wire: tools as ``bind_tools``
converts them (``convert_to_openai_tool``), the response format as the dict sent. A model bound
with tools in a chain (``model.bind_tools(tools)``, ``.bind(...)``, ``.with_retry()``) carries them
in its bindings, and so does the model inside ``with_structured_output(...)`` (a tool with
function calling, a ``response_format`` with json_schema or json_mode) and the primary of
``with_fallbacks(...)``; :func:`extras_of_model` reads them from there.

A provider's built-in tool (a dict whose ``type`` is not ``function``: ``{"type":
"web_search_preview"}``, ``{"type": "local_shell"}``) has no description of ours: it is sent as
given, counted as its JSON, and never left out by a tool budget; the first request that sends a
type says so in a warning naming the type (the last 256 types remembered).
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, cast

from langchain_core.language_models import BaseLanguageModel
from langchain_core.runnables import Runnable, RunnableParallel, RunnableSequence
from langchain_core.runnables.base import RunnableBindingBase
from langchain_core.runnables.fallbacks import RunnableWithFallbacks
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from agent_latency._caches import FirstTimes, LRUCache
from agent_latency._chat_format import builtin_tool_type, wire_tools
from agent_latency.tokens import TokenCounting

logger = logging.getLogger(__name__)

_CACHE_SIZE = 32
_CACHE_BYTES = 8 * 1024 * 1024
_WARNED_TYPES: Final = FirstTimes(256)
"""The built-in tool types warned of: once each per process."""


@dataclass(frozen=True, slots=True)
class RequestExtras:
    """The parts of a request other than its messages, as given by the user.

    Attributes:
        tools: Tools as ``bind_tools`` takes them: ``BaseTool``, functions, pydantic models or
            OpenAI tool dicts.
        response_format: The ``response_format`` sent (an OpenAI dict, or a schema to convert).
        strict: Whether the tools are sent with ``strict: true`` (structured output does this).
        output_tools: Tools sent after ``tools`` that a tool budget never drops (the
            structured-output tools of ``create_agent``).
    """

    tools: tuple[object, ...] = ()
    response_format: object | None = None
    strict: bool | None = None
    output_tools: tuple[object, ...] = ()


def extras(
    tools: object,
    response_format: object | None = None,
    *,
    strict: bool | None = None,
    output_tools: Sequence[object] = (),
) -> RequestExtras:
    """Checks and packs the tools and response format of a request.

    Raises:
        ValueError: When ``tools`` is not a sequence, or an item cannot be converted to an OpenAI
            tool definition (naming its index).
    """
    if tools is None:
        tools = ()
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise ValueError(
            f"PriorityTrimmer: tools must be a list of tools (BaseTool, functions, pydantic "
            f"models or OpenAI tool dicts), got {type(tools).__name__}."
        )
    return RequestExtras(tuple(tools), response_format, strict, tuple(output_tools))


def returning_directly(tools: Sequence[object]) -> frozenset[str]:
    """The names of the ``tools`` whose result ends an agent's run (a ``BaseTool`` made with
    ``return_direct=True``; a tool given as a dict, function or model has no such flag)."""
    return frozenset(t.name for t in tools if isinstance(t, BaseTool) and t.return_direct)


def extras_of_model(model: object) -> RequestExtras:
    """Returns the tools and response format bound to ``model`` (see the module docstring).

    Raises:
        TypeError: When ``model`` is not a LangChain Runnable, or no chat model is found in it
            (e.g. a ``RunnableLambda`` around one): the message says to pass ``tools=`` and
            ``response_format=`` to the trimmer instead.
    """
    if not isinstance(model, Runnable):
        raise TypeError(
            "PriorityTrimmer.for_model: expected the chat model the trimmed messages go to (e.g. "
            f"model.bind_tools(tools)), got {type(model).__name__}."
        )
    kwargs: dict[str, Any] = {}
    found: Runnable[Any, Any] | None = model
    while found is not None and not isinstance(found, BaseLanguageModel):
        if isinstance(found, RunnableBindingBase):  # .bind_tools().bind().with_retry() nest
            kwargs = {**found.kwargs, **kwargs}  # the outer binding wins
            found = found.bound
        elif isinstance(found, RunnableWithFallbacks):  # the fallbacks run only on failure
            found = found.runnable
        elif isinstance(found, RunnableSequence):  # with_structured_output: model | parser
            found = found.first
        elif isinstance(found, RunnableParallel):  # ... with include_raw: {"raw": model} | ...
            found = found.steps__.get("raw")
        else:
            found = None
    if found is None:
        raise TypeError(
            "PriorityTrimmer.for_model: no chat model found in the "
            f"{type(model).__name__} given (looked through bindings, with_structured_output and "
            "with_fallbacks), so its tools cannot be counted. Fix: pass the model itself, or "
            "give PriorityTrimmer(tools=..., response_format=...) what it sends."
        )
    # The tools are already wire dicts; a bound ``strict`` was applied when they were converted.
    return extras(kwargs.get("tools"), kwargs.get("response_format"))


class DescribedTool(NamedTuple):
    """One tool of a request as a tool budget weighs it.

    Attributes:
        name: Its function name; a built-in tool's type.
        text: Its name and description, for the relevance ranking.
        tokens: Its definition's tokens, counted alone.
        builtin: A provider's built-in tool: we cannot tell what it is for, so it is kept.
    """

    name: str
    text: str
    tokens: int
    builtin: bool


class ExtrasCounter:
    """Counts the tool definitions and response format of requests, remembering recent ones.

    An agent sends the same tool objects on every call: they are converted once, then looked up
    by identity and compared with a snapshot taken then (a deep copy of a tool dict or a dict
    ``response_format``, a ``BaseTool``'s name, description and ``args_schema``), so an edit in
    place is counted anew; the counter counts them as its chat template renders them. It
    remembers 32 requests' tools and at most 8 MiB (twice the JSON of their definitions: the
    snapshot and the definitions).

    Args:
        counter: The token counter.
    """

    def __init__(self, counter: TokenCounting) -> None:
        self._counter = counter
        self._cache = LRUCache(_CACHE_SIZE, _CACHE_BYTES)

    def count(self, request: RequestExtras) -> tuple[int, int]:
        """Returns the tokens of the tool definitions and of the response format of a request.

        Raises:
            ValueError: When a tool cannot be converted to an OpenAI tool definition, or the
                response format to a JSON schema.
        """
        if not request.tools and not request.output_tools and request.response_format is None:
            return 0, 0
        key = ("count", *map(id, request.tools), id(request.response_format), request.strict)
        key += tuple(map(id, request.output_tools))
        entry = self._cache.get(key)
        # The entry holds the objects themselves, so their ids are not reused while it lives.
        if entry is not None and _same(entry[0], request) and _unedited(entry[1], request):
            return cast(tuple[int, int], entry[2])
        seen = _snapshot(request)
        tools = wire_tools([*request.tools, *request.output_tools], strict=request.strict)
        _warn_of_builtin_tools(tools)
        counts = (
            self._counter.count_tools(tools) if tools else 0,
            self._count_response_format(request.response_format),
        )
        self._cache.put(key, (request, seen, counts), _json_bytes([tools, request.response_format]))
        return counts

    def describe(self, request: RequestExtras) -> list[DescribedTool]:
        """Returns each of ``request.tools`` as a tool budget weighs it."""
        key = ("describe", *map(id, request.tools), request.strict)
        entry = self._cache.get(key)
        if (
            entry is not None
            and _same(entry[0], request, response_format=False)
            and _unedited(entry[1], request)
        ):
            return cast(list[DescribedTool], entry[2])
        seen = _snapshot(request)
        described = []
        tools = wire_tools(request.tools, strict=request.strict)
        for tool in tools:
            # The Responses API's function tools are flat: their name is the tool's own.
            function = tool.get("function")
            fields = function if isinstance(function, Mapping) else tool
            name = str(fields.get("name") or tool.get("type") or "")
            text = f"{name.replace('_', ' ')} {fields.get('description') or ''}"
            builtin = builtin_tool_type(tool) is not None
            described.append(DescribedTool(name, text, self._counter.count_tools([tool]), builtin))
        self._cache.put(key, (request, seen, described), _json_bytes(tools))
        return described

    def _count_response_format(self, value: object) -> int:
        if value is None:
            return 0
        if not isinstance(value, Mapping):  # a schema, sent as ChatOpenAI converts it
            try:
                function = dict(convert_to_openai_tool(cast(Any, value))["function"])
            except Exception as exc:  # LangChain raises ValueError, TypeError or pydantic's errors
                raise ValueError(
                    f"response_format ({type(value).__name__}) cannot be converted to a JSON "
                    f"schema ({type(exc).__name__}); pass an OpenAI response_format dict "
                    "({'type': 'json_schema', 'json_schema': {...}}), a pydantic model, a "
                    "TypedDict or a JSON schema dict."
                ) from None
            function["schema"] = function.pop("parameters", {})
            value = {"type": "json_schema", "json_schema": function}
        return self._counter.count_response_format(value)


def _warn_of_builtin_tools(tools: Sequence[Mapping[str, Any]]) -> None:
    """Warns once per type of the provider's built-in tools among ``tools`` (by type alone:
    their settings may hold a server URL or a key)."""
    for tool in tools:
        kind = builtin_tool_type(tool)
        if kind is None:
            continue
        if not _WARNED_TYPES.first(kind):
            continue
        logger.warning(
            "Tool type %r is a provider's built-in tool, which the trimmer cannot describe: it is "
            "sent whole as given (a tool_budget never leaves it out) and counted as the JSON "
            "sent; what the provider adds to the prompt for it is not counted. Said once per "
            "tool type.",
            kind[:64],
        )


def _json_bytes(value: object) -> int:
    """About what a cache entry of tool definitions holds: twice their JSON (copy and original)."""
    return 2 * len(json.dumps(value, default=str))


def _same(cached: RequestExtras, request: RequestExtras, *, response_format: bool = True) -> bool:
    return (
        _same_objects(cached.tools, request.tools)
        and _same_objects(cached.output_tools, request.output_tools)
        and (not response_format or cached.response_format is request.response_format)
        and cached.strict == request.strict
    )


def _same_objects(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _view(value: object) -> object:
    """What of a tool or response format can be edited in place and change what is sent."""
    if isinstance(value, BaseTool):
        return (value.name, value.description, value.args_schema)
    return value  # a dict as it is now; a function or a class by identity


def _views(request: RequestExtras) -> list[object]:
    return [*map(_view, request.tools), *map(_view, request.output_tools), request.response_format]


def _snapshot(request: RequestExtras) -> list[object]:
    """A copy of the views of ``request``: a later :func:`_unedited` compares it with them."""
    return [
        copy.deepcopy(view) if isinstance(view, Mapping | tuple) else view
        for view in _views(request)
    ]


def _unedited(snapshot: list[object], request: RequestExtras) -> bool:
    # Equal lists compare in C; a dict against its copy, a function or class by identity.
    return _views(request) == snapshot
