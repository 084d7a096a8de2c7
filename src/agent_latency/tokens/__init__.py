"""Counting a request in the model's own tokens, offline, as its server will prefill it.

:class:`TokenCounter` counts messages, tools and a response format over a vocabulary and a chat
template's framing (:meth:`TokenCounter.for_model` picks both from a model name);
:class:`TokenCounting` is the protocol the trimmer and the simulator count with; a
:class:`PromptCalibration` learns how the server's ``usage.prompt_tokens`` differs from our count.

Exports: ``IMAGE_PART_TYPES``, ``PromptCalibration``, ``TOKENIZER_CHOICES``, ``TokenCounter``,
``TokenCounting``, ``VOCABULARY_NAMES``, ``Vocabulary``, ``calibration_for``,
``load_vocabulary``.
"""

from agent_latency.tokens._calibration import PromptCalibration, calibration_for
from agent_latency.tokens._counter import TokenCounter, TokenCounting
from agent_latency.tokens._media import IMAGE_PART_TYPES
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
