"""Counting a request in the model's own tokens, offline, as its server will prefill it.

:class:`TokenCounter` counts messages, tool definitions and a response format over a
*vocabulary* (Qwen, o200k, Llama 3, cl100k, a local ``tokenizer.json`` or the server's own
tokenize route, all loaded from files shipped with the packages) and a *framing* (the chat
template's tokens around each message and request); :meth:`TokenCounter.for_model` picks both
from a model name. :class:`TokenCounting` is the protocol the trimmer, the shortener and the
simulator count with. A :class:`PromptCalibration` learns, per endpoint and model, how the
server's ``usage.prompt_tokens`` differs from our count, and corrects the budget.

The parts: the counter and its protocol, the vocabularies, the server's tokenize route, the
framings, and the calibration.

Exports: ``IMAGE_PART_TYPES``, ``PromptCalibration``, ``TOKENIZER_CHOICES``, ``TokenCounter``,
``TokenCounting``, ``VOCABULARY_NAMES``, ``Vocabulary``, ``calibration_for``,
``load_vocabulary``.
"""

from agent_latency.tokens._calibration import PromptCalibration, calibration_for
from agent_latency.tokens._counter import TokenCounter, TokenCounting
from agent_latency.tokens._framing import IMAGE_PART_TYPES
from agent_latency.tokens._vocabularies import (
    TOKENIZER_CHOICES,
    VOCABULARY_NAMES,
    Vocabulary,
    load_vocabulary,
)

__all__ = [
    "IMAGE_PART_TYPES",
    "TOKENIZER_CHOICES",
    "VOCABULARY_NAMES",
    "PromptCalibration",
    "TokenCounter",
    "TokenCounting",
    "Vocabulary",
    "calibration_for",
    "load_vocabulary",
]
