"""Attack 7 on the default trimmer from a real user's side: inputs the other tests never tried
(photos and files, Hindi, Arabic, Japanese, question marks of other scripts, an agent's UUID
ids, long tool results, the conversation's cache key on the wire).

Each test reproduces a defect found here (it failed before its fix) with the public API: the
real ``ChatOpenAI`` over HTTP against the simulator where the wire matters, a real
``create_agent`` where an agent is involved; but for the ones marked *held* (what stood up to
the attack, kept so that it stays so).
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI
from support.chat_templates import gemma_template_accepts, roles
from support.simulators import settings_of
from support.wire import sent_request

from agent_latency import build_chat_model
from agent_latency.sim import SimulatorConfig, running_simulator
from agent_latency.tokens import TokenCounter
from agent_latency.trimming._cache_key import conversation_cache_key
from agent_latency.trimming._middleware import TrimmingMiddleware
from agent_latency.trimming._recall import PLAIN_MARKER_TEXT, TOOL_NAME, RecallingTrimmer
from agent_latency.trimming._trimmer import PriorityTrimmer

COUNTER = TokenCounter()
SYSTEM = "You are the operations assistant of a bookshop; answer from the conversation."
FAST = SimulatorConfig(
    overhead_ms=0, prefill_ms_per_token=0, decode_tokens_per_s=20_000, answer_tokens=8
)


def trimmer(budget: int, **options: Any) -> PriorityTrimmer:
    return PriorityTrimmer(budget, token_counter=COUNTER, **options)


def recalled_by_agent(messages: list[BaseMessage], budget: int) -> dict[str, Any]:
    """The state after ``create_agent`` with the middleware (recall on), the real ``ChatOpenAI``
    and the simulator answered ``messages``: the simulator calls ``recall`` with the phrase
    the question puts in double quotes."""
    with running_simulator(FAST) as sim:
        settings = settings_of(sim)
        agent = create_agent(
            build_chat_model(settings),
            tools=[],
            system_prompt=SYSTEM,
            middleware=[TrimmingMiddleware(trimmer(budget))],
        )
        state: dict[str, Any] = agent.invoke({"messages": messages})
    return state


def openai_model(sent: list[httpx.Request], **options: Any) -> ChatOpenAI:
    """A real ``ChatOpenAI`` whose requests are kept in ``sent`` (each answered ``ok``)."""

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        message = {"role": "assistant", "content": "ok"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        created = {"id": "1", "object": "chat.completion", "created": 0, "model": "m"}
        return httpx.Response(200, json={**created, "choices": [choice]})

    return ChatOpenAI(
        model="gpt-4o-mini",
        api_key="sk-test",  # type: ignore[arg-type]
        http_client=httpx.Client(transport=httpx.MockTransport(answer)),
        max_retries=0,
        **options,
    )


# --- the recall tool's answer with the ids a real agent gives its messages --------------------


def test_recall_reads_back_messages_when_many_match_and_ids_are_uuids() -> None:
    """An agent's state gives every message a UUID (LangGraph's ``add_messages``); a recall
    that matches many left-out messages listed 50 of those ids (about 1,250 tokens) and, where
    that took the whole quarter of the budget, read back nothing but ``[cut]`` (budget 2,000:
    an answer of 1,256 tokens, a quarter being 500)."""
    budget = 2000
    history: list[BaseMessage] = []
    for r in range(80):  # no ids: the agent's state gives them
        history += [
            HumanMessage(f"Note {r}: aisle {r} shelves were restocked with novels and atlases."),
            AIMessage(f"Noted, aisle {r}."),
        ]
    question = HumanMessage('Please recall "shelves" and say which aisle was restocked last.')
    state = recalled_by_agent([*history, question], budget)
    call, answer = state["messages"][-3:-1]
    assert isinstance(call, AIMessage) and call.tool_calls[0]["name"] == TOOL_NAME
    assert isinstance(answer, ToolMessage)
    assert COUNTER.count_text(answer.text) <= budget // 4
    # It reads back messages, the newest matches first, and names more to ask for by id.
    lines = answer.text.splitlines()
    assert lines[0].startswith("[id ") and "shelves were restocked" in lines[0]
    assert "more matched" in lines[-1] and "Their ids:" in lines[-1]


# --- questions asked with the question marks chat users type ----------------------------------

PORT = "The database port is 5432 on the server db-7."
PORT_AR = "منفذ قاعدة البيانات هو 5432 على الخادم db-7"
PORT_ZH = "数据库的端口是5432，在服务器db-7上。"
PORT_JA = "データベースのポート番号は5432で、サーバーはdb-7です。"
PORT_ES = "El puerto de la base de datos es 5432 en el servidor db-7."
ASKED = "and the database port, which one was it"


@pytest.mark.parametrize(
    ("fact", "question"),
    [
        pytest.param(PORT, ASKED + "❓", id="emoji"),
        pytest.param(PORT, ASKED + " ❔", id="white-emoji"),
        pytest.param(PORT, ASKED + "‽", id="interrobang"),
        pytest.param(PORT, ASKED + "⁉️", id="emoji-exclamation"),
        pytest.param(PORT, ASKED + "⁇", id="double"),
        pytest.param(PORT_AR, "ما هو منفذ قاعدة البيانات⸮", id="reversed"),
        pytest.param(PORT_ZH, "那数据库的端口是多少呢﹖", id="small"),
        pytest.param(PORT_ES, "¿y el puerto de la base de datos, cuál era", id="spanish-open"),
        pytest.param(PORT_JA, "ところで、データベースのポートは何番でしたか。", id="japanese-ka"),
        pytest.param(PORT_JA, "データベースのポートって何番だっけ", id="japanese-kke"),
        pytest.param(PORT_ZH, "数据库的端口你还记得吗", id="chinese-ma"),
    ],
)
def test_a_question_asked_without_the_ascii_mark_recalls_the_cut_fact(
    fact: str, question: str
) -> None:
    """A turn without ``?``, ``？`` or ``؟`` was a statement (also a Japanese one asked as
    written Japanese asks, with ``か。``), so the fact its words name was recalled only if it
    matched 80% of the turn: it stayed cut."""
    messages: list[BaseMessage] = [SystemMessage(SYSTEM, id="sys")]
    for r in range(40):
        note = f"Note {r}: the shelves were arranged " + "and cleaned " * 12
        messages += [HumanMessage(fact if r == 5 else note, id=f"u{r}"), AIMessage(f"OK {r}.")]
    messages.append(HumanMessage(question, id="q"))
    sent = trimmer(1500).trim(messages).messages
    assert "u5" in [m.id for m in sent]
    assert sent[-1].id == "q"


# --- a user message of text parts around an image ---------------------------------------------

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0K" * 5000}}


def with_photo(text: str, after: str, id: str) -> HumanMessage:
    """A user message as chat UIs send a photo: text, the image, more text."""
    parts = [{"type": "text", "text": text}, IMAGE, {"type": "text", "text": after}]
    return HumanMessage(parts, id=id)


def support_chat(fact: BaseMessage) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for r in range(40):
        note = f"Note {r}: the shelves were arranged " + "and cleaned " * 12
        messages += [fact if r == 5 else HumanMessage(note, id=f"u{r}"), AIMessage(f"OK {r}.")]
    return messages


def test_a_number_stated_before_a_photo_is_recalled_by_the_question_naming_it() -> None:
    """LangChain's ``message.text`` glues text parts together ("88123" + "It arrived" is the
    word "88123it"): a question naming the order number never found the message stating it."""
    fact = with_photo("My order number is 88123", "It arrived with a cracked screen", "u5")
    messages = [SystemMessage(SYSTEM), *support_chat(fact), HumanMessage("Has 88123 shipped?")]
    sent = trimmer(1500).trim(messages).messages
    assert fact in sent and sent[-1] is messages[-1]


def test_recall_reads_a_photo_message_back_by_its_words_naming_the_image() -> None:
    """In a real agent: the recall tool found nothing for the order number (its message's text
    parts glued), and reads back the text of a message with an image and names the image, never
    its data."""
    fact = with_photo("My order number is 88123", "It arrived with a cracked screen", "u5")
    question = HumanMessage('Please recall "88123" and tell me what happened to that order.')
    state = recalled_by_agent([*support_chat(fact), question], 1200)
    answer = state["messages"][-2]
    assert isinstance(answer, ToolMessage) and answer.name == TOOL_NAME
    assert answer.text == (
        "[id u5] human: [image] My order number is 88123\nIt arrived with a cracked screen"
    )


# --- the session key of conversations opening with a photo, or with half an emoji -------------


def photo(seed: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{seed * 2000}"}}


def session_values(*conversations: list[str | list[Any]]) -> list[list[str | None]]:
    """The ``x-session-id`` each call of each conversation carried to the simulator (one
    ``create_agent`` per conversation: a replica of its own)."""
    values: list[list[str | None]] = []
    with running_simulator(FAST) as sim:
        settings = settings_of(sim)
        for turns in conversations:
            middleware = TrimmingMiddleware(trimmer(2000), session_header="x-session-id")
            agent = create_agent(
                build_chat_model(settings), [], system_prompt=SYSTEM, middleware=[middleware]
            )
            messages: list[Any] = []
            before = len(sim.request_headers)
            for turn in turns:
                state = agent.invoke({"messages": [*messages, HumanMessage(turn)]})
                messages = state["messages"]
            values.append([h.get("x-session-id") for h in sim.request_headers[before:]])
    return values


def test_conversations_opening_with_the_same_words_on_other_photos_get_other_session_keys() -> None:
    """The key hashed the first user message's text only: every conversation opening with
    "What is on this photo?" (or with a photo alone) went to one replica, sharing no prefix
    past the words."""
    asked = "What is on this photo?"
    first = [{"type": "text", "text": asked}, photo("AAAA")]
    other = [{"type": "text", "text": asked}, photo("BBBB")]
    alone, alone_too = [photo("CCCC")], [photo("DDDD")]
    a, replica, b, c, d = session_values(
        [first, "And its colour?"], [first], [other], [alone], [alone_too]
    )
    assert a[0] is not None and set(a) == set(replica) == {a[0]} and len(a) > len(replica)
    assert len({a[0], b[0], c[0], d[0]}) == 4


def test_a_first_message_with_half_an_emoji_has_a_key() -> None:
    """A lone surrogate (``json.loads`` of a page cut inside an emoji) made the key's
    ``str.encode`` raise. (The OpenAI SDK refuses to send such a body too, so over
    ``ChatOpenAI`` the call fails all the same; the key no longer fails first.)"""
    key = conversation_cache_key([SystemMessage(SYSTEM), HumanMessage("caf\ud83d")])
    assert key is not None and key != conversation_cache_key([HumanMessage("caf\ud83e")])


# --- prompt_cache_key only where the client really sends to OpenAI -----------------------------

GEMINI = "https://generativelanguage.googleapis.com/v1beta/openai/"


@pytest.mark.parametrize(
    ("base_url", "takes"),
    [
        pytest.param("http://127.0.0.1:8000/v1", False, id="local-server"),
        pytest.param(
            "https://generativelanguage.googleapis.com/v1beta/openai/", False, id="gemini"
        ),
        pytest.param("https://api.openai.com/v1", True, id="openai"),
        pytest.param("https://eu.api.openai.com/v1", True, id="openai-eu"),
    ],
)
def test_the_cache_key_goes_where_openai_base_url_sends_only_if_that_is_openai(
    monkeypatch: pytest.MonkeyPatch, base_url: str, takes: bool
) -> None:
    """A ``ChatOpenAI`` without a base URL sends where the SDK's ``OPENAI_BASE_URL`` says (how
    many point it at vLLM, Ollama or Gemini): it was taken for OpenAI's API and got
    ``prompt_cache_key``, which strict servers refuse (Gemini, Groq, NVIDIA NIM: HTTP 400
    "Unknown name \"prompt_cache_key\"", Cerebras 422; zed-industries/zed#36215)."""
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    sent: list[httpx.Request] = []
    model = openai_model(sent)  # no base URL
    middleware = TrimmingMiddleware(trimmer(2000), recall=False)
    agent = create_agent(model, [], system_prompt=SYSTEM, middleware=[middleware])
    agent.invoke({"messages": [HumanMessage("Plan my trip to Porto.")]})
    (request,) = sent
    assert request.url.host == httpx.URL(base_url).host
    assert ("prompt_cache_key" in json.loads(request.content)) is takes


def test_a_cache_key_the_model_is_given_is_kept() -> None:
    """A tenant's key set on the model (``ChatOpenAI(model_kwargs={"prompt_cache_key": ...})``,
    which the request's settings override) was replaced by the conversation's."""
    sent: list[httpx.Request] = []
    key = {"prompt_cache_key": "tenant:acme"}
    model = openai_model(sent, base_url="https://api.openai.com/v1", model_kwargs=key)
    middleware = TrimmingMiddleware(trimmer(2000), recall=False)
    agent = create_agent(model, [], system_prompt=SYSTEM, middleware=[middleware])
    agent.invoke({"messages": [HumanMessage("Plan my trip to Porto.")]})
    assert [json.loads(r.content)["prompt_cache_key"] for r in sent] == ["tenant:acme"]


# --- Hindi and Bengali: words with vowel signs --------------------------------------------------

INDIC = {
    "hindi": (
        "डेटाबेस का पोर्ट 5432 है, सर्वर db-7 पर।",
        "नोट {r}: अलमारियाँ व्यवस्थित की गईं और साफ़ की गईं।",
        "डेटाबेस का पोर्ट क्या है?",
    ),
    "bengali": (
        "ডাটাবেসের পোর্ট 5432, সার্ভার db-7 এ।",
        "নোট {r}: তাকগুলো সাজানো ও পরিষ্কার করা হয়েছে।",
        "ডাটাবেসের পোর্ট কত?",
    ),
}


def indic_chat(language: str) -> list[BaseMessage]:
    fact, note, _ = INDIC[language]
    messages: list[BaseMessage] = []
    for r in range(80):
        said = fact if r == 20 else note.format(r=r)
        messages += [HumanMessage(said, id=f"u{r}"), AIMessage(f"ठीक {r}.", id=f"a{r}")]
    return messages


@pytest.mark.parametrize("language", sorted(INDIC))
def test_a_question_in_an_indic_script_recalls_the_cut_fact_it_names(language: str) -> None:
    """Python's ``\\w`` matches no combining mark, and the vowel signs of Devanagari and Bengali
    are: "डेटाबेस का पोर्ट क्या है?" had no term at all, so nothing was recalled."""
    question = HumanMessage(INDIC[language][2], id="q")
    messages = [SystemMessage(SYSTEM, id="sys"), *indic_chat(language), question]
    sent = trimmer(1500).trim(messages).messages
    assert "u20" in [m.id for m in sent] and sent[-1] is question


def test_recall_finds_a_hindi_message_by_its_words() -> None:
    """The recall tool of a real agent answered that no left-out message matched."""
    question = HumanMessage('कृपया "डेटाबेस पोर्ट" recall करें और बताएँ कौन सा पोर्ट खोलना है।')
    state = recalled_by_agent([*indic_chat("hindi"), question], 1200)
    call, answer = state["messages"][-3:-1]
    assert call.tool_calls[0]["args"] == {"query": "डेटाबेस पोर्ट"}
    assert isinstance(answer, ToolMessage)
    assert answer.text.startswith("[id u20] human: " + INDIC["hindi"][0])


# --- recall of what the middle of a long tool result held --------------------------------------


def test_recall_reads_back_the_part_of_a_long_tool_result_that_matches() -> None:
    """A tool result longer than a quarter of the budget is sent shortened (its start and end),
    and the recall tool read it back from its start, cut to a quarter of the budget: the start
    that was sent again, and never the middle, where the error asked for was."""
    lines = [
        f"2025-05-01 12:{i // 60 % 60:02d}:{i % 60:02d} job {i} finished ok" for i in range(3000)
    ]
    lines[1700] = "2025-05-01 12:28:20 job 1700 FAILED: ERR-4417 disk quota exceeded on /var/data"
    call = {"name": "read_log", "args": {"day": "2025-05-01"}, "id": "c1"}
    history: list[BaseMessage] = [
        HumanMessage("Check the nightly jobs.", id="h0"),
        AIMessage("", tool_calls=[call], id="a0"),
        ToolMessage("\n".join(lines), tool_call_id="c1", id="t0"),
        AIMessage("The nightly jobs ran.", id="a1"),
    ]
    question = HumanMessage('Please recall "ERR-4417" and tell me which job failed.', id="q")
    state = recalled_by_agent([*history, question], 2000)
    answer = state["messages"][-2]
    assert isinstance(answer, ToolMessage) and answer.name == TOOL_NAME
    assert answer.text.startswith("[id t0] tool: … ") and answer.text.endswith(" [cut]")
    assert lines[1700] in answer.text
    assert COUNTER.count_text(answer.text) <= 2000 // 4


# --- a correction read back before what it corrects --------------------------------------------


@pytest.mark.parametrize(
    ("said", "corrected", "asked"),
    [
        pytest.param(
            "The database port is 5432.",
            "Update: we moved the database during last week's migration, its port is now 6543.",
            "database port",
            id="english",
        ),
        pytest.param(
            "数据库端口是5432。",
            "更正：迁移以后，数据库端口现在改成6543了。",
            "数据库端口",
            id="chinese",
        ),
    ],
)
def test_recall_reads_a_correction_back_before_what_it_corrects(
    said: str, corrected: str, asked: str
) -> None:
    """The recall tool ranked by BM25 alone: the shorter, older statement came first and a
    correction saying more words after it, where the cache-first cut ranks the newer of two
    rounds holding the same words of the question first."""
    history: list[BaseMessage] = []
    for r in range(60):
        note = {10: said, 40: corrected}.get(r, f"Note {r}: the shelves were restocked.")
        history += [HumanMessage(note, id=f"u{r}"), AIMessage(f"OK {r}.", id=f"a{r}")]
    question = HumanMessage(f'Please recall "{asked}" and say which port to open.', id="q")
    state = recalled_by_agent([*history, question], 1000)
    answer = state["messages"][-2]
    assert isinstance(answer, ToolMessage) and answer.name == TOOL_NAME
    assert answer.text.splitlines()[:2] == [
        f"[id u40] human: {corrected}",
        f"[id u10] human: {said}",
    ]


# --- recall within its room wherever the match is; vowel points; a later system message --


@pytest.mark.parametrize("kind", ["log", "chinese", "mixed"])
@pytest.mark.parametrize("at", [0, 1, 1506, 3011, 3012])
def test_recall_reads_back_a_match_anywhere_in_a_long_text_within_its_room(
    kind: str, at: int
) -> None:
    """Wherever the words asked for sit in a long left-out text, of whatever density, the
    answer holds them within a quarter of the budget (the last stretch of a text was no
    window; a match near a window's end, or past denser text, was cut off)."""
    rng = random.Random(at)
    lines = [
        {
            "log": f"2025-05-01 job {i} finished ok",
            "chinese": f"第{i}行：书架已经整理好了，灰尘也擦干净了。",
            "mixed": rng.choice([f"job {i} ok", "🚀" * rng.randint(1, 20), "x" * 300]),
        }[kind]
        for i in range(3013)
    ]
    lines[at] = "ERR-4417 disk quota exceeded"
    left_out = [ToolMessage("\n".join(lines), tool_call_id="c1", id="t0")]
    answer = RecallingTrimmer(trimmer(1000)).read(left_out, "ERR-4417")
    assert lines[at] in answer and COUNTER.count_text(answer) <= 1000 // 4


def test_a_question_with_arabic_vowel_points_recalls_the_fact_written_without() -> None:
    """A shadda or a vowel point is a combining mark: "الشّحنة" split at it (or, kept whole, was
    another word than "الشحنة"), so the shipment asked about was never recalled."""
    messages: list[BaseMessage] = [SystemMessage(SYSTEM, id="sys")]
    for r in range(60):
        said = "وصلت الشحنة إلى المستودع في دبي" if r == 20 else f"ملاحظة {r}: تم ترتيب الرفوف"
        messages += [HumanMessage(said, id=f"u{r}"), AIMessage(f"تم {r}.", id=f"a{r}")]
    messages.append(HumanMessage("أين الشّحنة؟", id="q"))
    sent = trimmer(800).trim(messages).messages
    assert "u20" in [m.id for m in sent]


def test_a_system_message_added_later_keeps_the_conversations_session_key() -> None:
    """The key hashed the first system message anywhere: an agent without a system prompt
    whose app adds a reminder later changed key, and replica, mid-conversation."""
    with running_simulator(FAST) as sim:
        settings = settings_of(sim)
        middleware = TrimmingMiddleware(trimmer(2000), session_header="x-session-id")
        agent = create_agent(build_chat_model(settings), [], middleware=[middleware])
        state = agent.invoke({"messages": [HumanMessage("Plan my trip to Porto.")]})
        reminder = SystemMessage("Reminder: the user prefers trains.")
        agent.invoke({"messages": [*state["messages"], reminder, HumanMessage("And the hotel?")]})
        values = [headers.get("x-session-id") for headers in sim.request_headers]
    assert len(values) >= 2 and values[0] is not None and set(values) == {values[0]}


# --- held: growing chats of the shapes above, call after call ---------------------------------

V1_IMAGE = {"type": "image", "base64": "iVBORw0K" * 4000, "mime_type": "image/png"}
V1_FILE = {
    "type": "file",
    "base64": "JVBERi0x" * 4000,
    "mime_type": "application/pdf",
    "filename": "invoice.pdf",
}


def shaped(kind: str, n: int) -> BaseMessage:
    """A user turn of one of the shapes this module attacks with."""
    made: dict[str, Any] = {
        "v1_image": [{"type": "text", "text": f"Photo {n} of shelf code-{n}x."}, V1_IMAGE],
        "v1_file": [{"type": "text", "text": f"Invoice {n}, order {n}0{n}."}, V1_FILE],
        "parts": [
            {"type": "text", "text": f"My order number is {n}0{n}"},
            IMAGE,
            {"type": "text", "text": "It arrived damaged"},
        ],
        "hindi": f"नोट {n}: डेटाबेस का पोर्ट {n}0{n} है।",
        "hindi_ask": f"ऑर्डर {n // 2}0{n // 2} का क्या हुआ?",
        "emoji_ask": f"and order {n // 3}0{n // 3}❓",
        "spanish_ask": f"¿y el pedido {n // 2}0{n // 2}",
        "huge": f"Log {n}: " + "all jobs finished ok\n" * 2000,
    }
    if kind == "named":
        return HumanMessage(f"Order {n}0{n} is mine.", name="alice" if n % 2 else "bob")
    return HumanMessage(made[kind])


@pytest.mark.parametrize("seed", range(12))
def test_growing_chats_of_these_shapes_trim_alike_on_replicas_and_stay_valid(seed: int) -> None:
    rng = random.Random(seed)
    budget = rng.choice([300, 800, 2000])
    kinds = ["v1_image", "v1_file", "parts", "hindi", "hindi_ask", "emoji_ask"]
    kinds += ["spanish_ask", "huge", "named"]
    reused = RecallingTrimmer(trimmer(budget))
    messages: list[BaseMessage] = [SystemMessage(SYSTEM, id="sys")]
    for n in range(rng.randint(8, 24)):
        if rng.random() < 0.15:
            messages.append(SystemMessage(f"Policy {n}: be terse.", id=f"p{n}"))
        messages.append(shaped(rng.choice(kinds), n).model_copy(update={"id": f"u{n}"}))
        before = copy.deepcopy(messages)
        result = reused.trim(messages)
        fresh = RecallingTrimmer(trimmer(budget)).trim(messages)
        assert messages == before  # never modified
        assert [(m.id, m.content) for m in result.messages] == [
            (m.id, m.content) for m in fresh.messages
        ]
        assert result.tokens_after <= budget or result.over_budget
        sent = result.messages
        assert sent[0].id == "sys" and sent[-1].id == f"u{n}"  # the question, maybe shortened
        messages.append(AIMessage(f"Noted {n}.", id=f"a{n}"))
    # The real ChatOpenAI sends it: a message each, the question last.
    body = sent_request(list(result.messages), [])
    assert len(body["messages"]) == len(result.messages)
    assert body["messages"][-1]["role"] == "user"


# --- the elision marker on chat templates that take one system message -------------------------


def test_a_marked_request_to_a_gemma_model_passes_its_chat_template() -> None:
    """The marker was a second system message right after the system prompt: templates that take
    one system message (Gemma, Mistral, Llama 2) refused the request. Now it heads the first
    user message (a copy), which LangGraph sends right after the prompt the hook cannot move."""
    counter = TokenCounter.for_model("gemma-3-12b-it")
    prompt = SystemMessage(SYSTEM)
    hook = PriorityTrimmer(600, token_counter=counter).as_pre_model_hook(prompt=prompt)
    history: list[BaseMessage] = []
    for r in range(30):
        note = f"Note {r}: the shelves were restocked."
        history += [HumanMessage(note, id=f"u{r}"), AIMessage(f"OK {r}.", id=f"a{r}")]
    state = [*history, HumanMessage("What was restocked?", id="q")]
    before = copy.deepcopy(state)
    sent = hook({"messages": state})
    messages = [prompt, *sent["llm_input_messages"]]  # as LangGraph sends them
    assert len(messages) < len(state) + 1  # cut, so marked
    assert gemma_template_accepts(roles(messages))
    assert sum(m.text.count(PLAIN_MARKER_TEXT) for m in messages) == 1
    first = messages[1]
    given = next(m for m in state if m.id == first.id)
    assert first.type == "human" and first is not given
    assert first.content == PLAIN_MARKER_TEXT + "\n\n" + given.text
    assert state == before  # never modified
