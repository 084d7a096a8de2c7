"""The retention benchmark: what a trim keeps of the facts the latest question needs.

Model-free and reproducible. Each generated agent conversation (seeded; English or Chinese;
12 to 48 rounds of user turns, tool calls with long results and answers) hides one *fact* at a
known place, and its latest user message asks for it:

- ``head``, ``middle``, ``tail``: a user message of the first, a middle or the last history round;
- ``old_tool_result``: the tool result of a middle round;
- ``current_tool_result``: a tool result of the current turn (after the latest user message);
- ``constraint``: an instruction the user stated once, early on.

A fact is *retained* when its answer string still occurs in what the trim sends (kept whole, or
in the part of a shortened message that survives). Retention is the share of conversations whose
fact is retained, per strategy and budget; the TTFT beside it is what the simulator's default
latency model predicts for the prompt sent (:mod:`agent_latency.sim`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)

from agent_latency.bench._facts import value_kept
from agent_latency.tokens import TokenCounter
from agent_latency.trimming import PriorityTrimmer

Language = Literal["en", "zh"]
Place = Literal["head", "middle", "tail", "old_tool_result", "current_tool_result", "constraint"]

PLACES: Final[tuple[Place, ...]] = (
    "head",
    "middle",
    "tail",
    "old_tool_result",
    "current_tool_result",
    "constraint",
)
LANGUAGES: Final[tuple[Language, ...]] = ("en", "zh")


def needle_places() -> tuple[Place, ...]:
    """Where a needle case's fact can be stated (:data:`PLACES`), in the table's order."""
    return PLACES


SIZES: Final = (12, 24, 48)
"""History rounds of the generated conversations (about 6k, 12k and 24k cl100k tokens)."""
QUALITY_BUDGETS: Final = (6000, 3000)
SEEDS_PER_CASE: Final = 3

_ENTITIES: Final = ("Lyra", "Vesper", "Orion", "Calla", "Juniper", "Sable", "Tamsin", "Quill")
_TOPICS_EN: Final = (
    "shipping delays at the regional depot and the carrier's revised pickup schedule",
    "the quarterly billing run, late invoices and the dunning emails sent to customers",
    "warehouse stock counts, reorder points and the safety stock for fast movers",
    "the hiring plan for the support team and the interview loop for new agents",
    "returns processing, refund approvals and the restocking fee policy",
    "the new pricing page, discount codes and the annual plan promotion",
    "customs paperwork for international parcels and the tariff classification",
    "the on-call rota, incident reviews and the paging escalation policy",
)
_TOPICS_ZH: Final = (
    "区域仓库的发货延迟以及承运商调整后的取件时间表",
    "季度账单批处理、逾期发票以及发给客户的催款邮件",
    "仓库库存盘点、再订货点以及畅销品的安全库存",
    "客服团队的招聘计划以及新客服的面试流程",
    "退货处理、退款审批以及重新上架费用政策",
    "新的定价页面、折扣码以及年度套餐促销活动",
    "国际包裹的报关文件以及关税商品归类",
    "值班轮换、故障复盘以及告警升级策略",
)


@dataclass(frozen=True, slots=True)
class NeedleCase:
    """One generated conversation and the fact its latest question needs.

    Attributes:
        messages: The conversation, ending with the question (or with the current turn's tool
            results for ``current_tool_result``).
        answer: The string that must survive the trim.
        place: Where the fact was stated.
        language: ``en`` or ``zh``.
        rounds: History rounds before the question.
    """

    messages: tuple[BaseMessage, ...]
    answer: str
    place: Place
    language: Language
    rounds: int

    @property
    def question(self) -> HumanMessage:
        """The latest user message: the question that needs the fact."""
        return next(m for m in reversed(self.messages) if isinstance(m, HumanMessage))


def _filler(rng: random.Random, topic: str, language: Language, sentences: int) -> str:
    if language == "zh":
        parts = [
            f"关于{topic}，第{rng.randint(2, 97)}项记录显示处理时间为{rng.randint(3, 59)}分钟。"
            for _ in range(sentences)
        ]
        return "".join(parts)
    parts = [
        f"Regarding {topic}, record {rng.randint(2, 97)} shows a handling time of "
        f"{rng.randint(3, 59)} minutes and {rng.randint(1, 9)} follow-ups."
        for _ in range(sentences)
    ]
    return " ".join(parts)


def _fact(entity: str, code: str, language: Language) -> tuple[str, str]:
    """Returns the sentence that states the fact and the question that needs it."""
    if language == "zh":
        return (f"{entity}仓库的门禁密码是{code}，请记住。", f"{entity}仓库的门禁密码是多少？")
    return (
        f"The door code of the {entity} warehouse is {code}; please remember it.",
        f"What is the door code of the {entity} warehouse?",
    )


def _constraint(language: Language) -> tuple[str, str, str]:
    """Returns the constraint, the question that depends on it and the answer string."""
    if language == "zh":
        return (
            "以后所有价格都请用欧元报价。",
            "年度套餐每月多少钱？请按我要求的币种报价。",
            "欧元",
        )
    return (
        "From now on, quote every price in euros.",
        "How much is the annual plan per month, in the currency I asked for earlier?",
        "in euros",
    )


def make_case(seed: int, place: Place, language: Language, rounds: int) -> NeedleCase:
    """Generates one conversation with its fact at ``place`` (same seed, same conversation)."""
    rng = random.Random(f"{seed}-{place}-{language}-{rounds}")
    topics = _TOPICS_ZH if language == "zh" else _TOPICS_EN
    entity = rng.choice(_ENTITIES)
    code = f"{rng.randint(1000, 9999)}-{rng.choice('KXQZ')}{rng.choice('MRTW')}"
    statement, question = _fact(entity, code, language)
    answer = code
    if place == "constraint":
        statement, question, answer = _constraint(language)
    target = {
        "head": 0,
        "constraint": 0,
        "middle": rounds // 2,
        "old_tool_result": rounds // 2,
        "tail": rounds - 1,
    }.get(place)
    system = (
        "你是一个物流公司的客服助手，回答要简洁。"
        if language == "zh"
        else "You are a support assistant for a logistics company. Answer briefly."
    )
    messages: list[BaseMessage] = [SystemMessage(system)]
    for index in range(rounds):
        topic = topics[index % len(topics)]
        user = _filler(rng, topic, language, 2)
        if index == target and place in ("head", "middle", "tail", "constraint"):
            user = f"{user} {statement}"
        result = _filler(rng, topic, language, 10)
        if index == target and place == "old_tool_result":
            sentences = result.split("。" if language == "zh" else ". ")
            sentences.insert(rng.randint(0, len(sentences)), statement)
            result = ("。" if language == "zh" else ". ").join(sentences)
        call_id = f"call_{index}"
        messages += [
            HumanMessage(user),
            AIMessage(
                "", tool_calls=[{"name": "search_records", "args": {"topic": topic}, "id": call_id}]
            ),
            ToolMessage(result, tool_call_id=call_id),
            AIMessage(_filler(rng, topic, language, 2)),
        ]
    messages.append(HumanMessage(question))
    if place == "current_tool_result":
        result = f"{_filler(rng, topics[0], language, 6)} {statement}"
        messages += [
            AIMessage("", tool_calls=[{"name": "search_records", "args": {}, "id": "call_now"}]),
            ToolMessage(result, tool_call_id="call_now"),
        ]
    return NeedleCase(tuple(messages), answer, place, language, rounds)


def generate_cases(seeds: int = SEEDS_PER_CASE) -> list[NeedleCase]:
    """Every place, language and size, ``seeds`` conversations each."""
    return [
        make_case(seed, place, language, rounds)
        for place in PLACES
        for language in LANGUAGES
        for rounds in SIZES
        for seed in range(seeds)
    ]


def retained(case: NeedleCase, sent: Sequence[BaseMessage]) -> bool:
    """Whether the fact's answer still occurs in what is sent (the workload's rule)."""
    return value_kept(case.answer, sent)


Trim = Callable[[Sequence[BaseMessage]], list[BaseMessage]]


@dataclass(frozen=True, slots=True)
class QualityRow:
    """Retention of one strategy at one budget.

    Attributes:
        strategy: ``age``, ``cache_first`` (each also ``+compaction``), ``moving_cut`` or
            ``trim_messages_last``.
        budget: The prompt token budget.
        retention: Share of cases whose fact survived (0 to 1).
        by_place: Retention per place of the fact.
        mean_tokens: Mean prompt tokens sent.
        model_ttft_ms: The TTFT the simulator's default latency model predicts for that prompt.
    """

    strategy: str
    budget: int
    retention: float
    by_place: dict[str, float]
    mean_tokens: float
    model_ttft_ms: float

    def to_json(self) -> dict[str, object]:
        """The row as ``bench --json`` writes it under ``"quality"``."""
        return {
            "strategy": self.strategy,
            "budget": self.budget,
            "retention": round(self.retention, 4),
            "by_place": {place: round(share, 4) for place, share in self.by_place.items()},
            "mean_tokens": round(self.mean_tokens, 1),
            "model_ttft_ms": round(self.model_ttft_ms, 1),
        }


def strategies(budget: int, counter: TokenCounter) -> dict[str, Trim]:
    """The trims compared: ours (the default head and tail rounds) by age and cache-first (the
    default), each with and without compaction, and with moving cuts (the history ranked by
    relevance to the question on every call); and LangChain's ``trim_messages`` keeping the last
    messages."""
    ours = {
        name: PriorityTrimmer(budget, token_counter=counter, **options)
        for name, options in (
            ("age", {"history_selection": "age"}),
            ("age+compaction", {"history_selection": "age", "compact_tool_results": True}),
            ("cache_first", {}),
            ("cache_first+compaction", {"compact_tool_results": True}),
            ("moving_cut", {"prefix_stable": False}),
        )
    }

    def last(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return trim_messages(
            list(messages),
            max_tokens=budget,
            token_counter=counter.count_messages,
            strategy="last",
            include_system=True,
            start_on="human",
        )

    trims: dict[str, Trim] = {name: _messages_of(trimmer) for name, trimmer in ours.items()}
    trims["trim_messages_last"] = last
    return trims


def _messages_of(trimmer: PriorityTrimmer) -> Trim:
    return lambda messages: trimmer.trim(messages).messages


def run_quality(
    budgets: Sequence[int] = QUALITY_BUDGETS,
    *,
    seeds: int = SEEDS_PER_CASE,
    counter: TokenCounter | None = None,
) -> list[QualityRow]:
    """Runs every strategy on every generated case at every budget."""
    from agent_latency.sim import SimulatorConfig

    latency = SimulatorConfig()
    counter = counter or TokenCounter()
    cases = generate_cases(seeds)
    rows: list[QualityRow] = []
    for budget in budgets:
        for name, trim in strategies(budget, counter).items():
            hits: dict[str, list[bool]] = {place: [] for place in PLACES}
            tokens = 0
            for case in cases:
                sent = trim(case.messages)
                hits[case.place].append(retained(case, sent))
                tokens += counter.count_messages(sent)
            mean_tokens = tokens / len(cases)
            total = [hit for values in hits.values() for hit in values]
            rows.append(
                QualityRow(
                    strategy=name,
                    budget=budget,
                    retention=sum(total) / len(total),
                    by_place={p: sum(v) / len(v) for p, v in hits.items()},
                    mean_tokens=mean_tokens,
                    model_ttft_ms=latency.ttft_ms(mean_tokens, mean_tokens),
                )
            )
    return rows
