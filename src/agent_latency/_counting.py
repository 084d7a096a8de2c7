"""The token-counter protocol: what the trimmer, the shortener and the simulator count with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from langchain_core.messages import BaseMessage


@runtime_checkable
class TokenCounting(Protocol):
    """Counts prompt tokens the way one model's server does: its vocabulary and chat template.

    Every ``count_*`` result is a number of prompt tokens; together,
    ``count_request(messages, tools, response_format)`` is what the server prefills.

    Attributes:
        name: The tokenizer, for diagnostics (e.g. ``"qwen + qwen framing"``).
        exact: Whether the vocabulary is the model's own (``False``: a cl100k estimate).
    """

    name: str
    exact: bool

    def encode(self, text: str) -> list[int]:
        """Returns the token ids of ``text``."""

    def decode(self, tokens: Sequence[int]) -> str:
        """Returns the text of ``tokens``."""

    def count_text(self, text: str) -> int:
        """Returns the number of tokens of ``text``, without framing."""

    def count_message(self, message: BaseMessage) -> int:
        """Returns the tokens one message adds to a prompt, its framing included."""

    def count_framing(self, messages: Sequence[BaseMessage]) -> int:
        """Returns what a request adds to its messages: BOS, default system prompt, priming."""

    def count_messages(self, messages: Sequence[BaseMessage]) -> int:
        """Returns the messages' tokens plus :meth:`count_framing`."""

    def count_tools(self, tools: Sequence[Any]) -> int:
        """Returns the tokens of tool definitions as the template renders them."""

    def count_response_format(self, response_format: Mapping[str, Any]) -> int:
        """Returns the prompt tokens of a ``response_format`` (0 where it is not in the prompt)."""

    def count_request(
        self,
        messages: Sequence[BaseMessage],
        tools: Sequence[Any] = (),
        response_format: Mapping[str, Any] | None = None,
    ) -> int:
        """Returns the prompt tokens of a whole request."""
