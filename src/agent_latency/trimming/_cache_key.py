"""A per-conversation key, for servers and routers that route or cache by one.

OpenAI's ``prompt_cache_key`` sends requests that share it to the same machines, whose caches
then hold their prefix. The key here is derived from the conversation's first messages (its
system prompt and first user message), so every call of a conversation and every replica
serving it send the same one, with no state to share. It is a SHA-256 digest: no text of the
conversation, nor any credential, can be read from it.

Routers in front of self-hosted replicas that hash a request header rather than read
``prompt_cache_key`` get the same key in the header they name (:func:`checked_session_header`,
:func:`with_session_header`):

* vLLM production-stack's router, ``--routing-logic session --session-key <header>``: its
  ``SessionRouter`` sends the requests carrying the same value of that header to the same
  engine (docs.vllm.ai/projects/production-stack, "Router Logic").
* SGLang's model gateway (SMG), sticky sessions: the routing key of a request without a body
  ``rid`` is read from a header, ``x-smg-routing-key`` by default (smg-project/smg-docs,
  concepts/routing/sticky-sessions.md).
* LLM Gateway takes ``x-session-id`` before ``prompt_cache_key`` (docs.llmgateway.io,
  features/sessions); Merge Gateway ``X-Session-Id`` (docs.merge.dev, cache-aware routing).
* Any consistent-hash load balancer on a header: Envoy or Kong ``hash_on: header``, Google
  Cloud's ``HEADER_FIELD`` session affinity.

OpenRouter needs neither: its provider sticky routing keeps a cached conversation on one
provider by itself (openrouter.ai/docs, prompt caching, "Provider Sticky Routing").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from langchain_core.language_models import BaseChatModel
from langchain_core.load import dumpd
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableWithFallbacks
from langchain_core.runnables.base import RunnableBindingBase
from langchain_core.runnables.config import ensure_config

from agent_latency._caches import LRUCache
from agent_latency._chat_format import role_of
from agent_latency.trimming._relevance import text_of
from agent_latency.trimming._shortening import split_content

CACHE_KEY_SETTING: Final = "prompt_cache_key"
"""The request field (and ``ChatOpenAI`` keyword) that carries the key."""
HEADERS_SETTING: Final = "extra_headers"
"""The ``ChatOpenAI`` keyword (the OpenAI SDK's request option) that adds request headers."""
_OPENAI_HOST: Final = "api.openai.com"
"""OpenAI's API, and under it its data-residency hosts (``eu.api.openai.com``)."""
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP field name (RFC 9110, section 5.1)."""
_CLIENT_HEADERS: Final = frozenset(
    {"authorization", "api-key", "content-length", "content-type", "host", "user-agent"}
)
"""Headers the client sets itself: a session value there would break the request."""
_SERIALIZED: Final = "_serialized"
"""Where a LangChain chat model keeps its serialisation for its callbacks, made on first use
(``BaseChatModel._serialized``, a cached property)."""
_MODELS: Final = 8
"""How many chat models a :class:`KeyedModels` remembers the serialisation of, and how many
models built by configurable models are remembered."""
_CONFIGURABLE: Final = ("langchain.chat_models.base", "_ConfigurableModel")
"""Where langchain defines the configurable model ``init_chat_model`` returns."""
_BUILT: Final = LRUCache(_MODELS)
"""Models built by configurable models (see :func:`_built`), by the configurable model's id and
the fields a call's config gives, with the configurable model."""


def conversation_cache_key(messages: Sequence[BaseMessage]) -> str | None:
    """The key of the conversation ``messages`` belong to; ``None`` before its first user message.

    Conversations that begin alike (the text of the first system message before the first user
    message, and that user message's text, images and files, and name) share a key, as they
    share a prefix. A system message further on (a reminder added later) does not change it,
    nor does a second one before the first user message: an app may add one on some calls only
    (memories it found), and a conversation's calls must share its key. So conversations told
    apart only there (each customer's profile after one system prompt) share a key.
    """
    system: str | None = None
    for message in messages:
        role = role_of(message)
        if role == "user":
            first_user = message
            break
        if role == "system" and system is None:
            system = text_of(message)
    else:
        return None
    said = f"{system or ''}\0{text_of(first_user)}"
    # Its images and files: conversations opening with the same words on other photos share
    # no prefix past the words. And the speaker's name, which is sent too.
    others = split_content(first_user.content)[1]
    if others:
        said += "\0parts:" + json.dumps(others, sort_keys=True, default=str)
    if first_user.name:
        said += f"\0name:{first_user.name}"
    # A lone surrogate (half an emoji of a page cut short) is no UTF-8: kept as it is.
    digest = hashlib.sha256(said.encode(errors="surrogatepass")).hexdigest()
    return f"agent-latency-{digest[:32]}"


def chat_model_of(model: object) -> BaseChatModel | None:
    """The chat model ``model`` is, or calls first through bindings (``bind``, ``with_retry``)
    and fallbacks (``with_fallbacks``: its primary), which an agent runs as its model, or, for
    a configurable model on the way, the one it builds for this call's run config; ``None`` for
    anything else."""
    return _unwrapped(model)[0]


def builds_per_call(model: object) -> bool:
    """Whether ``model`` reaches its chat model through a configurable model
    (``init_chat_model(..., configurable_fields=...)``), which builds one from each call's run
    config: another call may build another."""
    return _unwrapped(model)[2]


def _unwrapped(model: object) -> tuple[BaseChatModel | None, list[Mapping[str, Any]], bool]:
    """:func:`chat_model_of` ``model``, the keywords each binding on the way to it adds to its
    calls, outermost first, and :func:`builds_per_call` ``model``."""
    bound: list[Mapping[str, Any]] = []
    built = False
    while True:
        if isinstance(model, RunnableBindingBase):
            bound.append(model.kwargs)
            model = model.bound
        elif isinstance(model, RunnableWithFallbacks):
            model = model.runnable
        elif (configurable := _configurable(model)) is not None:
            model, built = _built(configurable), True
            if model is None:
                return None, bound, built
        else:
            return (model if isinstance(model, BaseChatModel) else None), bound, built


def _configurable(model: object) -> Any:
    """``model`` if it is the configurable model of ``init_chat_model(...,
    configurable_fields=...)`` (langchain's ``_ConfigurableModel``), else ``None``: told by its
    class's name and module, so that the trimmer imports no agent framework."""
    kind = type(model)
    return model if (kind.__module__, kind.__qualname__) == _CONFIGURABLE else None


def _built(configurable: Any) -> object:
    """The model ``configurable`` builds for this call's run config (LangChain's, in this
    context), as its own call will; ``None`` if that fails (it fails in its own call, with its
    own error). Read, never called: one built for the same fields is reused (a build takes
    about 0.2 ms, and a call's key and name ask for it several times)."""
    try:
        config = ensure_config()
        key = (id(configurable), repr(sorted(configurable._model_params(config).items())))
        found: tuple[Any, object] | None = _BUILT.get(key)
        if found is None or found[0] is not configurable:
            found = (configurable, configurable._model(config))
            _BUILT.put(key, found)
        return found[1]
    except Exception:
        return None


def gives_cache_key(settings: Mapping[str, Any], model: object) -> bool:
    """Whether the caller already sends a ``prompt_cache_key`` (a tenant's, say): in the
    request's model ``settings``, or on the model, in its ``model_kwargs`` (which the request
    would otherwise override), either ``extra_body`` or the keywords a binding of it adds."""
    chat, bound, _ = _unwrapped(model)
    model_kwargs = getattr(chat, "model_kwargs", None) or {}
    given = [settings, model_kwargs, *bound]
    bodies = [getattr(chat, "extra_body", None), *(found.get("extra_body") for found in given)]
    return any(CACHE_KEY_SETTING in found for found in given) or any(
        isinstance(body, Mapping) and CACHE_KEY_SETTING in body for body in bodies
    )


class KeyedModels:
    """Copies of chat models that send a conversation's ``prompt_cache_key`` themselves.

    The key goes into the copy's ``model_kwargs``, which the model merges into its request (as
    ``ChatOpenAI`` and LangChain's other chat models do), not into the request's model settings:
    a middleware that swaps the model after ours (``ModelFallbackMiddleware``) keeps the settings
    and would send the key, decided for this model's API, to another server. The copy is shallow
    (its client and connection pool are the model's) and the model is left as it was. LangChain
    serialises a chat model for its callbacks on each new object's first call (80 µs for a
    ``ChatOpenAI``): each copy carries its model's, made once, so the callbacks see the model as
    they did.
    """

    def __init__(self) -> None:
        # By the model's id, with the model (an id can be reused once it is gone).
        self._serialized = LRUCache(_MODELS)

    def keyed(self, model: object, key: str) -> Runnable[Any, Any] | None:
        """A copy of ``model`` that sends ``key`` as its ``prompt_cache_key`` (of a binding, the
        bindings copied around a copy of the chat model); ``None`` for a model with no
        ``model_kwargs`` to carry it."""
        if isinstance(model, RunnableBindingBase):
            bound = self.keyed(model.bound, key)
            return None if bound is None else model.model_copy(update={"bound": bound})
        if isinstance(model, RunnableWithFallbacks):  # the key for the primary's API only
            primary = self.keyed(model.runnable, key)
            return None if primary is None else model.model_copy(update={"runnable": primary})
        if (configurable := _configurable(model)) is not None:
            return _keyed_configurable(configurable, key)
        if not isinstance(model, BaseChatModel) or "model_kwargs" not in type(model).model_fields:
            return None
        model_kwargs = getattr(model, "model_kwargs", None) or {}
        copy = model.model_copy(update={"model_kwargs": {**model_kwargs, CACHE_KEY_SETTING: key}})
        copy.__dict__[_SERIALIZED] = self._serialization(model)
        return copy

    def _serialization(self, model: BaseChatModel) -> Any:
        found: tuple[BaseChatModel, Any] | None = self._serialized.get(id(model))
        if found is None or found[0] is not model:
            found = (model, dumpd(model))
            self._serialized.put(id(model), found)
        return found[1]


def _keyed_configurable(model: Any, key: str) -> Runnable[Any, Any] | None:
    """A copy of a configurable model whose every chat model sends ``key``: the key in the
    ``model_kwargs`` of its default config (a call's config naming ``model_kwargs`` replaces
    them). Still a configurable model, so an agent asks it for structured output as it asks
    the model (``create_agent`` reads a built model's profile); ``None`` when the model it
    builds for this call has no ``model_kwargs``."""
    built = chat_model_of(model)
    if built is None or "model_kwargs" not in type(built).model_fields:
        return None
    default = model._default_config
    model_kwargs = {**(default.get("model_kwargs") or {}), CACHE_KEY_SETTING: key}
    copy: Runnable[Any, Any] = type(model)(
        default_config={**default, "model_kwargs": model_kwargs},
        configurable_fields=model._configurable_fields,
        config_prefix=model._config_prefix,
        queued_declarative_operations=model._queued_declarative_operations,
    )
    return copy


def takes_cache_key(model: object) -> bool:
    """Whether ``model`` sends to a server known to take ``prompt_cache_key``: OpenAI's own API
    (a ``ChatOpenAI`` whose client sends to api.openai.com or a regional host of it such as
    eu.api.openai.com; with no base URL given, the OpenAI SDK's ``OPENAI_BASE_URL`` environment
    variable may name another server)."""
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:  # pragma: no cover - langchain-openai is a core dependency
        return False
    model = chat_model_of(model)
    if not isinstance(model, ChatOpenAI):
        return False
    client = getattr(model, "root_client", None)
    base = model.openai_api_base or str(getattr(client, "base_url", "") or "")
    host = urlsplit(base).hostname or ""
    return not base or host == _OPENAI_HOST or host.endswith("." + _OPENAI_HOST)


def checked_session_header(owner: str, name: object) -> str | None:
    """Returns ``name``, the header to send the conversation's key in, or ``None`` for none.

    Raises:
        ValueError: When ``name`` is neither ``None`` nor an HTTP header name, or names a
            header the client sets itself (``authorization``, ``content-type``, ...).
    """
    if name is None:
        return None
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        raise ValueError(
            f"{owner}: session_header must be an HTTP header name such as 'x-session-id', "
            f"got {name!r}."
        )
    if name.lower() in _CLIENT_HEADERS:
        raise ValueError(
            f"{owner}: session_header {name!r} is a header the client sets itself; name the "
            "header your router hashes, such as 'x-session-id'."
        )
    return name


def with_session_header(
    settings: Mapping[str, Any], model: object, header: str, key: str
) -> Mapping[str, Any] | None:
    """Model settings that also send ``key`` in the request header ``header``; ``None`` when it
    cannot be sent so.

    A value the caller already gives that header (in the ``extra_headers`` of ``settings``, of
    a binding on the way to the chat model or of its ``model_kwargs``, or in its
    ``default_headers``, in any case) is kept, and so are the other headers they give: the
    settings' ``extra_headers`` replace the others when sent. Behind ``with_fallbacks`` the
    settings go to every model tried: a primary's own ``extra_headers`` (a credential, say) would
    reach its fallbacks' servers, or be replaced on its own calls, so then none is sent
    (``None``).

    Args:
        settings: The request's model settings (keywords of the model call).
        model: The request's model: a chat model (a ``ChatOpenAI`` or another), or one wrapped
            (``bind``, ``with_retry``, ``with_fallbacks``: see :func:`chat_model_of`).
        header: The header's name.
        key: The conversation's key.
    """
    outside: list[Mapping[str, Any]] = []  # the bindings' keywords, the outermost first
    while isinstance(model, RunnableBindingBase):
        outside.append(model.kwargs)
        model = model.bound
    behind_fallbacks = isinstance(model, RunnableWithFallbacks)
    chat_model, inside, _ = _unwrapped(model)
    model_kwargs = getattr(chat_model, "model_kwargs", None) or {}
    own = [model_kwargs, *reversed(inside)]
    if behind_fallbacks and any(map(_headers, own)):
        return None
    given = [*own, *reversed(outside), settings]  # the outer win
    headers = {name: value for each in given for name, value in _headers(each).items()}
    defaults = getattr(chat_model, "default_headers", None) or {}
    if header.lower() in {name.lower() for name in (*headers, *defaults)}:
        return settings
    return {**settings, HEADERS_SETTING: {**headers, header: key}}


def _headers(keywords: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``extra_headers`` ``keywords`` give (none when not a mapping)."""
    headers = keywords.get(HEADERS_SETTING)
    return headers if isinstance(headers, Mapping) else {}
