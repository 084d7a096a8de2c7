"""Evidence retention: does what a strategy sends still hold the turns a question needs?

For each question of a public set (:mod:`~agent_latency.bench._public_set`) the call's messages
are the system prompt, the whole conversation and the question as the last user message; the
question's evidence is kept when every evidence turn's id is among the ids of the messages the
strategy returns (a shortened copy keeps its id, and counts as kept).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from agent_latency.bench._public_set import Conversation, Question
from agent_latency.bench._strategies import StrategyFactory

SYSTEM_PROMPT: Final = (
    "You are a helpful assistant with a long memory of this conversation. Answer the user's "
    "latest question from what was said before, briefly."
)
"""The system prompt every call of the cache-first bench starts with."""


@dataclass(frozen=True)
class EvidenceRow:
    """How often one strategy at one budget kept all of a question's evidence.

    Attributes:
        strategy: The strategy's name.
        budget: The token budget.
        questions: How many questions were asked.
        kept: Of these, how many kept every evidence turn.
    """

    strategy: str
    budget: int
    questions: int
    kept: int

    @property
    def percent(self) -> float:
        """The share of questions with all evidence kept, in percent (0 without questions)."""
        return 100.0 * self.kept / self.questions if self.questions else 0.0


def question_call(conversation: Conversation, question: Question) -> list[BaseMessage]:
    """The messages of the call that asks ``question`` after the whole ``conversation``."""
    return [
        SystemMessage(content=SYSTEM_PROMPT, id="system"),
        *conversation.messages,
        HumanMessage(content=question.text, id=f"question:{question.id}"),
    ]


def evidence_kept(sent: Sequence[BaseMessage], question: Question) -> bool:
    """Whether every evidence turn of ``question`` is among the messages ``sent``."""
    ids = {message.id for message in sent}
    return all(turn in ids for turn in question.evidence)


def evidence_retention(
    conversations: Sequence[Conversation],
    strategies: Mapping[str, StrategyFactory],
    budgets: Sequence[int],
) -> list[EvidenceRow]:
    """Asks every question of ``conversations`` through each strategy at each budget (a fresh
    strategy per conversation, which sees that conversation's questions in turn).

    Returns:
        A row per budget and strategy, budgets in the given order, strategies in theirs.
    """
    rows = []
    for budget in budgets:
        for name, factory in strategies.items():
            asked = kept = 0
            for conversation in conversations:
                strategy = factory(budget)  # fresh per conversation, as in the replay
                for question in conversation.questions:
                    asked += 1
                    kept += evidence_kept(strategy(question_call(conversation, question)), question)
            rows.append(EvidenceRow(name, budget, asked, kept))
    return rows
