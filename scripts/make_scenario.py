"""Writes the bench's default scenario, ``src/agent_latency/scenarios/agent_8k.json``.

The scenario is one request of a tool-using support agent, about 8,200 prompt tokens by the
project's ``TokenCounter``: a system prompt that also lists the tools (so the file stays a plain
OpenAI-format message list and every token is visible to the trimmer and to ``TokenCounter``),
twelve rounds of history (a user message, an assistant tool call, the tool's JSON result, the
assistant's answer), and a new question. All data is made up from fixed seeds, so running this
script again writes the same bytes:

    .venv/bin/python scripts/make_scenario.py [--tokens 8200] [--output FILE.json]

The size is reached by adding records to the tool results in turn until the count reaches the
target, so the result lands within one record (about 60 tokens) above it. A target below the
twelve rounds' natural size (about 7,800 tokens) is reached the other way: records are removed
in turn (each tool result keeps one), then the oldest rounds, until the count is at most the
target, and records are added back while it stays so: the result lands within one record below.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from langchain_core.messages import convert_to_messages

from agent_latency.tokens import TokenCounter

DEFAULT_OUTPUT = Path(__file__).resolve().parents[1] / "src/agent_latency/scenarios/agent_8k.json"
DEFAULT_TOKENS = 8200
SEED = 20_240_607

SYSTEM_PROMPT = """\
You are Relay, the operations assistant of Northwind Outfitters, an online retailer of outdoor \
clothing and equipment shipping to the EU, the UK and North America. You work beside the \
support and fulfilment team: staff members ask you about orders, shipments, refunds, exchanges, \
inventory, payments and the health of the shop's services, and you answer with facts you \
retrieved through the tools below.

## How you work
1. Look things up before you answer. Never invent order numbers, tracking events, amounts, \
stock levels, dates or policy clauses; if a tool returns nothing, say so.
2. Call the tool that answers the question most directly. Prefer one precise call over several \
broad ones. Read-only tools may be called without asking.
3. Tools that change something (create_ticket, create_exchange, issue_refund) need the staff \
member's explicit go-ahead in the current conversation. Repeat the exact action and amount \
before calling them.
4. Quote policy by its article id (for example KB-112 §3) so staff can check the source.
5. Money: state amounts with their currency as the order records them. Refunds above 250 EUR \
(or the equivalent) need a team lead's approval: draft the refund and say who must approve it.
6. Personal data: show a customer's address or phone number only when the task needs it, and \
never paste full payment card data; the last four digits are enough.
7. Carrier claims: a parcel without a tracking scan for 5 business days inside the EU (8 \
outside) counts as delayed; after 10 business days (15 outside) it may be declared lost and a \
trace must be opened with the carrier before reshipping.
8. Damaged goods: ask for a photo unless the order total is below 40 EUR; offer an exchange \
first, a refund when the replacement is out of stock.
9. When logs or metrics show an incident, say which service, since when, and how many orders \
or customers it touches; link the runbook when the knowledge base has one.
10. Keep answers short: a one-line summary, then the facts as a short list, then the next step \
you recommend. Use the customer's name only when the staff member does.

## Tools
Each tool takes a JSON object with the parameters listed and returns JSON.

- get_order(order_id: string) - One order: customer, items, amounts, status, shipments, notes.
- search_orders(status?: string, older_than_days?: integer, customer_id?: string, limit?: \
integer) - Orders matching all given filters, newest first; at most `limit` (default 20).
- get_shipment_tracking(tracking_number: string) - A shipment's carrier, service level and \
scan events, oldest first.
- search_kb(query: string, top_k?: integer) - Knowledge-base articles ranked by relevance, \
each with id, title and the matching sections.
- create_ticket(kind: "carrier_trace" | "quality" | "billing" | "engineering", order_id?: \
string, summary: string, priority?: "low" | "normal" | "high") - Opens a ticket and returns \
its id and queue.
- check_inventory(sku: string) - Stock per warehouse, incoming purchase orders and the \
earliest ship date.
- create_exchange(order_id: string, return_sku: string, replacement_sku: string, reason: \
string) - Creates an exchange with a prepaid return label.
- get_payment(order_id: string) - Payment provider, captured and refunded amounts, and the \
provider's event log for the order.
- issue_refund(order_id: string, amount: number, currency: string, reason: string) - \
Refunds to the original payment method; returns the refund id and state.
- get_customer(customer_id: string) - Profile, lifetime value, open tickets and recent contacts.
- query_metrics(service: string, metric: string, window_minutes: integer) - A time series \
in one-minute buckets.
- search_logs(service: string, level?: string, since_minutes?: integer, query?: string, \
limit?: integer) - Matching log lines, newest first.

## Context
Today is Thursday 6 June 2024. The warehouses are Rotterdam (RTM), Leipzig (LEJ) and Columbus \
(CMH). Carriers: DHL Parcel, PostNL, UPS, USPS. Support hours are 08:00-20:00 CET; the \
on-call engineer for shop services is reached through an engineering ticket with priority \
high."""

FIRST_NAMES = ["Dana", "Jonas", "Amelie", "Pieter", "Sofia", "Liam", "Noor", "Mateo", "Ingrid"]
LAST_NAMES = ["Whitfield", "Kramer", "de Vries", "Novak", "Lindqvist", "Okafor", "Rossi", "Brandt"]
PRODUCTS = [
    ("JKT-ALP-3L", "Alpine 3L shell jacket", 289.0),
    ("JKT-GLC-DWN", "Glacier down jacket", 239.0),
    ("BTS-TRL-MID", "Trailhead mid hiking boots", 169.0),
    ("PNT-SCR-SFT", "Scree softshell trousers", 119.0),
    ("BPK-RDG-38", "Ridge 38 L backpack", 149.0),
    ("TNT-ORB-2P", "Orbit 2-person tent", 349.0),
    ("SLP-CRS-M5", "Crest -5 °C sleeping bag", 199.0),
    ("FLC-BSE-200", "Basecamp 200 fleece", 69.0),
    ("SCK-MRN-3PK", "Merino hiking socks, 3-pack", 29.0),
    ("HDL-LUM-400", "Lumen 400 headlamp", 49.0),
]
COLOURS = ["Glacier Blue", "Moss", "Graphite", "Ember", "Sand"]
SIZES = ["XS", "S", "M", "L", "XL"]
CITIES = [
    ("Utrecht", "NL"),
    ("Hamburg", "DE"),
    ("Lyon", "FR"),
    ("Gdansk", "PL"),
    ("Leeds", "GB"),
    ("Graz", "AT"),
    ("Aarhus", "DK"),
]
HUBS = ["Nieuwegein hub", "Duisburg hub", "Leipzig sort centre", "Bochum depot", "Venlo hub"]


@dataclass(frozen=True)
class Round:
    """One history round: the question, the tool called, its result builder and the answer.

    ``result`` builds the tool's JSON result from a random generator and a record count; more
    records append entries, so the count is the size knob.
    """

    question: str
    preamble: str
    tool: str
    arguments: dict[str, Any]
    result: Callable[[random.Random, int], dict[str, Any]]
    records: int
    answer: str


def _money(rng: random.Random, low: float, high: float) -> float:
    return round(rng.uniform(low, high), 2)


def _timestamp(rng: random.Random, day: int) -> str:
    return f"2024-06-{day:02d}T{rng.randint(6, 21):02d}:{rng.randint(0, 59):02d}:00Z"


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def _order_line(rng: random.Random) -> dict[str, Any]:
    sku, title, price = rng.choice(PRODUCTS)
    colour, size = rng.choice(COLOURS), rng.choice(SIZES)
    return {
        "sku": f"{sku}-{colour[:3].upper()}-{size}",
        "title": f"{title}, {colour}, {size}",
        "quantity": rng.choice([1, 1, 1, 2]),
        "unit_price": price,
        "warehouse": rng.choice(["RTM", "LEJ"]),
    }


def _order(
    order_id: str, customer: dict[str, str], placed: str, rng: random.Random, records: int
) -> dict[str, Any]:
    lines = [_order_line(rng) for _ in range(max(1, records // 2))]
    if order_id == "NW-47790":
        lines[0] = {
            **lines[0],
            "sku": "JKT-ALP-3L-GLA-M",
            "title": "Alpine 3L shell jacket, Glacier Blue, M",
            "unit_price": 289.0,
            "quantity": 1,
        }
    subtotal = sum(line["unit_price"] * line["quantity"] for line in lines)
    return {
        "order_id": order_id,
        "customer": customer,
        "placed_at": placed,
        "status": "shipped" if order_id == "NW-48213" else "delivered",
        "currency": "EUR",
        "items": lines,
        "amounts": {
            "subtotal": round(subtotal, 2),
            "shipping": 0.0,
            "discount": -20.0,
            "tax": round(subtotal * 0.21, 2),
            "total": round(subtotal * 1.21 - 20.0, 2),
        },
        "shipping_address": {"city": "Utrecht", "country": "NL", "postcode": "3581"},
        "shipments": [
            {
                "tracking_number": f"3SNWF{order_id[3:]}001",
                "carrier": "PostNL",
                "service": "Standard 2-3 days",
                "shipped_at": "2024-05-27T09:15:00Z",
            }
        ],
        "notes": [
            {"at": _timestamp(rng, 3), "by": "support", "text": f"Customer asked for ETA ({n})."}
            for n in range(1, records - len(lines) + 1)
        ],
    }


def _tracking(rng: random.Random, records: int) -> dict[str, Any]:
    events = [
        {"at": "2024-05-27T09:15:00Z", "location": "Rotterdam RTM", "event": "Shipment received"},
        {"at": "2024-05-27T21:40:00Z", "location": "Nieuwegein hub", "event": "Sorted"},
    ]
    for n in range(records):
        events.append(
            {
                "at": _timestamp(rng, 28 + n % 3),
                "location": rng.choice(HUBS),
                "event": rng.choice(
                    ["Sorted", "In transit between hubs", "Held at hub: capacity", "Re-routed"]
                ),
                "scan_id": f"SC{rng.randint(10**7, 10**8 - 1)}",
            }
        )
    return {
        "tracking_number": "3SNWF48213001",
        "carrier": "PostNL",
        "service": "Standard 2-3 days",
        "status": "in_transit",
        "last_scan_days_ago": 6,
        "events": events,
    }


def _kb(rng: random.Random, records: int) -> dict[str, Any]:
    sections = [
        (
            "KB-112",
            "Delayed and lost parcels",
            "§3",
            "A parcel counts as delayed after 5 "
            "business days without a scan (EU) and may be declared lost after 10. Open a carrier "
            "trace first; reship or refund once the trace is opened, without waiting for it.",
        ),
        (
            "KB-112",
            "Delayed and lost parcels",
            "§4",
            "Summit members get a free reship by "
            "express service; tell the customer the new tracking number the same day.",
        ),
        (
            "KB-207",
            "Delivered but not received",
            "§1",
            "Ask the customer to check neighbours "
            "and the safe place; wait 48 hours after the delivered scan before acting.",
        ),
        (
            "KB-207",
            "Delivered but not received",
            "§2",
            "After 48 hours open a carrier trace "
            "with the proof of delivery request. Reship without waiting for the trace when the "
            "order total is below 300 EUR and the customer has no prior claim this year.",
        ),
    ]
    results = []
    for n in range(records):
        article, title, section, text = sections[n % len(sections)]
        results.append(
            {
                "id": article,
                "title": title,
                "section": section,
                "score": round(0.93 - 0.04 * n - rng.random() * 0.01, 3),
                "text": text,
                "updated": f"2024-0{rng.randint(1, 5)}-{rng.randint(10, 28)}",
            }
        )
    return {"query": "parcel stuck in carrier hub", "results": results}


def _ticket(rng: random.Random, records: int) -> dict[str, Any]:
    return {
        "ticket_id": f"T-{rng.randint(30000, 39999)}",
        "queue": "carrier-claims",
        "kind": "carrier_trace",
        "priority": "high",
        "sla_hours": 24,
        "history": [
            {"at": _timestamp(rng, 6), "event": f"Routing rule {n} matched: PostNL, NL, Summit"}
            for n in range(records)
        ],
    }


def _inventory(rng: random.Random, records: int) -> dict[str, Any]:
    warehouses = [
        {
            "warehouse": code,
            "on_hand": rng.randint(0, 40),
            "reserved": rng.randint(0, 6),
            "bin": f"{code}-{rng.randint(1, 40):02d}-{rng.choice('ABCDEF')}",
        }
        for code in ("RTM", "LEJ", "CMH")
    ]
    incoming = [
        {
            "purchase_order": f"PO-{rng.randint(5000, 5999)}",
            "quantity": rng.randint(20, 200),
            "eta": f"2024-06-{rng.randint(10, 28)}",
            "supplier": rng.choice(["Fjordtex", "Alpenweb", "Kestrel Mills"]),
        }
        for _ in range(records)
    ]
    return {
        "sku": "JKT-ALP-3L-GLA-M",
        "title": "Alpine 3L shell jacket, Glacier Blue, M",
        "warehouses": warehouses,
        "incoming": incoming,
        "earliest_ship_date": "2024-06-07",
    }


def _exchange(rng: random.Random, records: int) -> dict[str, Any]:
    return {
        "exchange_id": f"EX-{rng.randint(7000, 7999)}",
        "order_id": "NW-47790",
        "return_label": {"carrier": "DHL Parcel", "tracking_number": "JJD0147790001"},
        "replacement": {"sku": "JKT-ALP-3L-GLA-M", "warehouse": "RTM", "ships": "2024-06-07"},
        "steps": [
            f"Step {n + 1}: notification {n + 1} queued for the customer" for n in range(records)
        ],
    }


def _pending_refunds(rng: random.Random, records: int) -> dict[str, Any]:
    orders = []
    for _ in range(records):
        city, country = rng.choice(CITIES)
        orders.append(
            {
                "order_id": f"NW-{rng.randint(45000, 47999)}",
                "customer": _person(rng),
                "country": country,
                "city": city,
                "refund_requested": f"2024-05-{rng.randint(10, 29)}",
                "amount": _money(rng, 29, 420),
                "currency": "GBP" if country == "GB" else "EUR",
                "provider": rng.choice(["Adyen", "PayPal", "Klarna"]),
                "state": rng.choice(["pending", "pending", "failed_retrying"]),
            }
        )
    orders.sort(key=lambda order: order["refund_requested"])
    return {"filters": {"status": "refund_pending", "older_than_days": 7}, "orders": orders}


def _payment(rng: random.Random, records: int) -> dict[str, Any]:
    events = [
        {
            "at": _timestamp(rng, 1 + n % 5),
            "type": rng.choice(["refund.attempt", "refund.failed", "webhook.retry"]),
            "code": rng.choice(["card_expired", "issuer_unavailable", "timeout"]),
            "reference": f"PSP-{rng.randint(10**9, 10**10 - 1)}",
        }
        for n in range(records)
    ]
    return {
        "order_id": "NW-46102",
        "provider": "Adyen",
        "method": {"type": "card", "brand": "Visa", "last4": "4417", "expiry": "2024-04"},
        "captured": {"amount": 238.0, "currency": "EUR", "at": "2024-05-02T10:11:00Z"},
        "refunded": {"amount": 0.0, "currency": "EUR"},
        "events": events,
    }


def _customer(rng: random.Random, records: int) -> dict[str, Any]:
    contacts = [
        {
            "at": _timestamp(rng, 1 + n % 5),
            "channel": rng.choice(["email", "chat", "phone"]),
            "topic": rng.choice(["late delivery", "refund status", "sizing", "damaged item"]),
            "agent": _person(rng),
            "resolved": rng.random() < 0.5,
        }
        for n in range(records)
    ]
    return {
        "customer_id": "C-20931",
        "name": "Pieter Novak",
        "since": "2019-11-02",
        "tier": "Trail member",
        "lifetime_value": {"amount": 1874.5, "currency": "EUR"},
        "orders": 14,
        "returns": 5,
        "open_tickets": ["T-31877", "T-32090"],
        "recent_contacts": contacts,
    }


def _metrics(rng: random.Random, records: int) -> dict[str, Any]:
    points = []
    for minute in range(records):
        base = 0.4 if minute < records // 2 else 3.8
        points.append(
            {
                "t": f"2024-06-06T13:{minute % 60:02d}:00Z",
                "error_rate_pct": round(base + rng.random(), 2),
                "requests": rng.randint(180, 260),
            }
        )
    return {
        "service": "checkout-api",
        "metric": "error_rate",
        "window_minutes": 60,
        "points": points,
    }


def _logs(rng: random.Random, records: int) -> dict[str, Any]:
    messages = [
        "Adyen capture timeout after 10000 ms; will retry",
        "Circuit breaker OPEN for adyen-payments (5 failures in 30 s)",
        "Webhook signature check failed: clock skew 42 s",
        "Retry budget exhausted for order capture",
    ]
    lines = [
        {
            "at": f"2024-06-06T13:{rng.randint(30, 59):02d}:{rng.randint(0, 59):02d}Z",
            "level": "ERROR",
            "pod": f"payments-{rng.choice(['7d9f', '5c2a', '8e41'])}-{rng.randint(100, 999)}",
            "message": rng.choice(messages),
            "trace_id": f"{rng.getrandbits(64):016x}",
        }
        for _ in range(records)
    ]
    lines.sort(key=lambda line: line["at"], reverse=True)
    return {"service": "payments", "level": "ERROR", "since_minutes": 30, "lines": lines}


ROUNDS = [
    Round(
        "Customer Dana Whitfield says her order NW-48213 still hasn't arrived. Can you check it?",
        "I'll pull up the order.",
        "get_order",
        {"order_id": "NW-48213"},
        partial(
            _order,
            "NW-48213",
            {"id": "C-18842", "name": "Dana Whitfield", "tier": "Summit member"},
            "2024-05-24T18:42:10Z",
        ),
        6,
        "NW-48213 (Dana Whitfield, Summit member) shipped on 27 May from Rotterdam with PostNL "
        "Standard, tracking 3SNWF48213001. Status is still 'shipped', no delivery recorded. "
        "Next step: check the tracking events.",
    ),
    Round(
        "What does the tracking say for that shipment?",
        "Checking the carrier's scans.",
        "get_shipment_tracking",
        {"tracking_number": "3SNWF48213001"},
        _tracking,
        5,
        "The parcel has been moving between PostNL hubs without a delivery scan; the last scan "
        "is 6 days old, with a capacity hold at a hub. That is past the 5-business-day delay "
        "threshold (rule 7). Next step: check the policy for a stuck parcel.",
    ),
    Round(
        "Which policy applies to a parcel stuck in a carrier hub for 6 days?",
        "Searching the knowledge base.",
        "search_kb",
        {"query": "parcel stuck in carrier hub", "top_k": 4},
        _kb,
        4,
        "KB-112 §3: after 5 business days without a scan the parcel is delayed; open a carrier "
        "trace, then reship or refund without waiting for it. KB-112 §4: Summit members get a "
        "free express reship. Next step: open the trace if you agree.",
    ),
    Round(
        "Yes, open a carrier trace for NW-48213, high priority.",
        "Opening a carrier trace ticket for NW-48213 with high priority.",
        "create_ticket",
        {
            "kind": "carrier_trace",
            "order_id": "NW-48213",
            "summary": "PostNL parcel 3SNWF48213001 without scan for 6 days",
            "priority": "high",
        },
        _ticket,
        3,
        "Carrier trace opened in the carrier-claims queue, priority high, 24-hour SLA. Per "
        "KB-112 §4 you can offer Dana a free express reship now.",
    ),
    Round(
        "Different case: order NW-47790, the customer says the jacket's zipper was broken on "
        "arrival. What did they order?",
        "Looking up NW-47790.",
        "get_order",
        {"order_id": "NW-47790"},
        partial(
            _order,
            "NW-47790",
            {"id": "C-17305", "name": "Liam Okafor", "tier": "Trail member"},
            "2024-05-30T08:03:51Z",
        ),
        4,
        "NW-47790 includes an Alpine 3L shell jacket; the total is above 40 EUR, so rule 8 asks "
        "for a photo of the zipper before we act. Then offer an exchange first.",
    ),
    Round(
        "They sent a photo, the damage is clear. Do we have the Alpine 3L in Glacier Blue, M?",
        "Checking stock for JKT-ALP-3L-GLA-M.",
        "check_inventory",
        {"sku": "JKT-ALP-3L-GLA-M"},
        _inventory,
        4,
        "Yes: JKT-ALP-3L-GLA-M is in stock in Rotterdam and can ship tomorrow (7 June); more "
        "units are incoming on purchase orders. An exchange is possible.",
    ),
    Round(
        "Go ahead and create the exchange for the broken zipper.",
        "Creating the exchange: return JKT-ALP-3L-GLA-M, replacement JKT-ALP-3L-GLA-M.",
        "create_exchange",
        {
            "order_id": "NW-47790",
            "return_sku": "JKT-ALP-3L-GLA-M",
            "replacement_sku": "JKT-ALP-3L-GLA-M",
            "reason": "Zipper broken on arrival, photo received",
        },
        _exchange,
        3,
        "Exchange created: prepaid DHL return label JJD0147790001, the replacement ships from "
        "Rotterdam on 7 June. The customer gets the label by email.",
    ),
    Round(
        "Which refunds have been pending for more than 7 days?",
        "Searching for refunds pending over 7 days.",
        "search_orders",
        {"status": "refund_pending", "older_than_days": 7, "limit": 20},
        _pending_refunds,
        9,
        "Several refunds are pending for more than 7 days, mostly on Adyen, a few in "
        "'failed_retrying'. The oldest should go first; one is NW-46102, worth checking.",
    ),
    Round(
        "Why is the refund for NW-46102 stuck?",
        "Checking the payment record for NW-46102.",
        "get_payment",
        {"order_id": "NW-46102"},
        _payment,
        6,
        "NW-46102 was paid by a Visa card ending 4417 that expired in April 2024; Adyen's refund "
        "attempts fail (card_expired / issuer_unavailable). Next step: ask the customer for "
        "bank details or offer store credit; 238 EUR is within your own approval limit.",
    ),
    Round(
        "Customer C-20931 has complained three times this week. Show me their profile.",
        "Fetching customer C-20931.",
        "get_customer",
        {"customer_id": "C-20931"},
        _customer,
        6,
        "Pieter Novak (C-20931), Trail member since 2019, lifetime value 1,874.50 EUR, 14 orders "
        "and 5 returns, two open tickets (T-31877, T-32090), several recent contacts about late "
        "deliveries and refunds. Worth a personal follow-up by one agent.",
    ),
    Round(
        "Is checkout having problems? What's the error rate over the last hour?",
        "Querying checkout-api error rate for the last 60 minutes.",
        "query_metrics",
        {"service": "checkout-api", "metric": "error_rate", "window_minutes": 60},
        _metrics,
        12,
        "checkout-api's error rate jumped from under 1.5% to about 4% halfway through the hour "
        "and has stayed there. That points to a dependency; payments is the usual suspect.",
    ),
    Round(
        "Show me the recent errors from the payments service.",
        "Searching payments ERROR logs from the last 30 minutes.",
        "search_logs",
        {"service": "payments", "level": "ERROR", "since_minutes": 30, "limit": 20},
        _logs,
        8,
        "payments logs Adyen capture timeouts and an open circuit breaker for adyen-payments "
        "since about 13:30, which matches the checkout error spike. Recommend an engineering "
        "ticket with priority high for the on-call engineer.",
    ),
]

NEW_QUESTION = (
    "Back to Dana Whitfield: she just wrote that tracking for NW-48213 now says 'delivered' but "
    "nothing arrived. Given everything above, what should I do next, and should we reship or "
    "refund?"
)


def build_messages(records: list[int], first_round: int = 0) -> list[dict[str, Any]]:
    """Returns the scenario as OpenAI-format messages, with ``records[i]`` entries in round i.

    Args:
        records: Entries per round, for the rounds from ``first_round`` on.
        first_round: How many of the oldest rounds to leave out.
    """
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    rounds = list(enumerate(ROUNDS))[first_round:]
    for (index, round_), count in zip(rounds, records, strict=True):
        call_id = f"call_{random.Random(f'{SEED}-id-{index}').getrandbits(96):024x}"
        result = round_.result(random.Random(f"{SEED}-round-{index}"), count)
        messages += [
            {"role": "user", "content": round_.question},
            {
                "role": "assistant",
                "content": round_.preamble,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": round_.tool,
                            "arguments": json.dumps(round_.arguments, ensure_ascii=False),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": json.dumps(result, ensure_ascii=False, indent=1),
            },
            {"role": "assistant", "content": round_.answer},
        ]
    messages.append({"role": "user", "content": NEW_QUESTION})
    return messages


def count_tokens(messages: list[dict[str, Any]], counter: TokenCounter) -> int:
    """Returns the prompt tokens of OpenAI-format messages by the project's TokenCounter."""
    return counter.count_messages(convert_to_messages(messages))


def make_scenario(target_tokens: int) -> list[dict[str, Any]]:
    """Grows the tool results in turn until the scenario reaches ``target_tokens``, or shrinks
    them (then drops the oldest rounds) until it is at most ``target_tokens``."""
    counter = TokenCounter()
    records = [round_.records for round_ in ROUNDS]
    messages = build_messages(records)
    if count_tokens(messages, counter) > target_tokens:
        return _shrunk(records, target_tokens, counter)
    turn = 0
    while count_tokens(messages, counter) < target_tokens:
        records[turn % len(records)] += 1
        turn += 1
        messages = build_messages(records)
    return messages


def _shrunk(records: list[int], target_tokens: int, counter: TokenCounter) -> list[dict[str, Any]]:
    first = 0
    messages = build_messages(records)
    turn = 0
    while count_tokens(messages, counter) > target_tokens:
        if any(count > 1 for count in records):
            while records[turn % len(records)] == 1:
                turn += 1
            records[turn % len(records)] -= 1
            turn += 1
        elif len(records) > 1:
            first, records = first + 1, records[1:]
        else:
            raise SystemExit(
                f"make_scenario: {target_tokens} tokens is below the smallest scenario."
            )
        messages = build_messages(records, first)
    while True:  # a dropped round may leave room: grow the records back up to the target
        grown = records.copy()
        grown[turn % len(grown)] += 1
        turn += 1
        candidate = build_messages(grown, first)
        if count_tokens(candidate, counter) > target_tokens:
            return messages
        records, messages = grown, candidate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="target size")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="file to write")
    options = parser.parse_args()
    messages = make_scenario(options.tokens)
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(messages, ensure_ascii=False, indent=1) + "\n", "utf-8")
    tokens = count_tokens(messages, TokenCounter())
    print(f"{options.output}: {len(messages)} messages, {tokens} tokens")


if __name__ == "__main__":
    main()
