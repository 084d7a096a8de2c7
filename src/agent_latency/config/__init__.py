"""Settings from the files users already keep and the environment, and the channel they describe.

:func:`load_settings` reads them into one frozen :class:`Settings`; every bad value is a
:class:`ConfigError` naming the file, the key and the fix. :func:`build_chat_model` (imported on
first use: it loads langchain_openai and openai) turns the channel into a ``ChatOpenAI``.

Exports: ``ConfigError``, ``HISTORY_SELECTIONS``, ``HistorySelection``, ``LLMSettings``,
``MAX_TOKENS_PARAMS``, ``MetricsSettings``, ``PRIORITY_CLASSES``, ``PriorityClass``,
``PromptSettings``, ``SETTINGS``, ``Setting``, ``Settings``, ``StreamingSettings``, ``TRIM_MODES``,
``TrimMode``, ``build_chat_model``, ``check_base_url``, ``is_http_url``, ``load_settings``,
``removed_value``, ``with_channel_overrides``.
"""

from typing import TYPE_CHECKING, Any

from agent_latency.config._channel import check_base_url, is_http_url
from agent_latency.config._declared import Setting
from agent_latency.config._settings import (
    HISTORY_SELECTIONS,
    MAX_TOKENS_PARAMS,
    PRIORITY_CLASSES,
    SETTINGS,
    TRIM_MODES,
    HistorySelection,
    LLMSettings,
    MetricsSettings,
    PriorityClass,
    PromptSettings,
    Settings,
    StreamingSettings,
    TrimMode,
    load_settings,
    removed_value,
    with_channel_overrides,
)
from agent_latency.config._sources import ConfigError

if TYPE_CHECKING:
    from agent_latency.config._chat_model import build_chat_model

__all__ = [
    "HISTORY_SELECTIONS",
    "MAX_TOKENS_PARAMS",
    "PRIORITY_CLASSES",
    "SETTINGS",
    "TRIM_MODES",
    "ConfigError",
    "HistorySelection",
    "LLMSettings",
    "MetricsSettings",
    "PriorityClass",
    "PromptSettings",
    "Setting",
    "Settings",
    "StreamingSettings",
    "TrimMode",
    "build_chat_model",
    "check_base_url",
    "is_http_url",
    "load_settings",
    "removed_value",
    "with_channel_overrides",
]


def __getattr__(name: str) -> Any:
    # build_chat_model loads langchain_openai and openai (about 0.5 s): only when it is used.
    if name == "build_chat_model":
        from agent_latency.config._chat_model import build_chat_model

        return build_chat_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
