"""Image, audio and file parts cost what OpenAI counts for them (images, by its published rule
and the size in the image's header) or an estimate that does not undercount (audio, files)."""

from __future__ import annotations

import base64
import socket
import struct
import zlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from support.wire import sent_request

from agent_latency.tokens import TokenCounter, _framing, _media
from agent_latency.trimming import PriorityTrimmer

TEXT = {"type": "text", "text": "What is in this?"}


def png(width: int, height: int) -> bytes:
    body = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + body
    return (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    )


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0) + b";"


def webp_vp8x(width: int, height: int) -> bytes:
    chunk = b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4
    chunk += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def webp_vp8(width: int, height: int) -> bytes:
    frame = b"\x10\x02\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    chunk = b"VP8 " + struct.pack("<I", len(frame)) + frame
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def webp_vp8l(width: int, height: int) -> bytes:
    frame = b"\x2f" + struct.pack("<I", (width - 1) | (height - 1) << 14)
    chunk = b"VP8L" + struct.pack("<I", len(frame)) + frame
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", 2 + len(payload)) + payload


def jpeg(width: int, height: int, *, exif_bytes: int = 0, frame: int = 0xC0) -> bytes:
    """A JPEG's headers: JFIF, an EXIF segment (a phone's, with its thumbnail, is tens of KB),
    a quantisation table, fill bytes, then the frame header with the size."""
    data = b"\xff\xd8" + segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    if exif_bytes:
        data += segment(0xE1, b"Exif\x00\x00" + b"\x5a" * exif_bytes)
    data += segment(0xDB, b"\x00" + bytes(64)) + b"\xff\xff"
    sof = struct.pack(">BHHB", 8, height, width, 3) + b"\x01\x22\x00\x02\x11\x01\x03\x11\x01"
    return data + segment(frame, sof) + segment(0xDA, b"\x03\x01\x00\x02\x11\x03\x11\x00\x3f\x00")


def wav(byte_rate: int, data_bytes: int) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, 1, byte_rate // 2, byte_rate, 2, 16)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    chunks += b"data" + struct.pack("<I", data_bytes) + bytes(data_bytes)
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{b64(data)}"


def image_url(url: str, detail: str | None = None) -> dict[str, Any]:
    image = {"url": url} if detail is None else {"url": url, "detail": detail}
    return {"type": "image_url", "image_url": image}


def cost(part: dict[str, Any]) -> int:
    """What the part adds to a message's count."""
    counter = TokenCounter()
    return counter.count_message(HumanMessage([TEXT, part])) - counter.count_message(
        HumanMessage([TEXT])
    )


def test_openai_published_examples() -> None:
    # platform.openai.com/docs/guides/images-vision, "Calculating costs"
    assert _media.image_tokens(1024, 1024) == 765
    assert _media.image_tokens(2048, 4096) == 1105
    assert _media.image_tokens(4096, 8192) == 1105  # scaled to 1024x2048, then 768x1536
    assert _media.image_tokens(512, 512) == 255  # small images are not scaled up
    assert _media.image_tokens(1920, 1080) == 1105 == _media.UNKNOWN_IMAGE_TOKENS  # 16:9
    assert _media.image_tokens(4032, 3024) == 765  # a 4:3 phone photo


@pytest.mark.parametrize(
    ("encoded", "size"),
    [
        (png(1024, 1024), (1024, 1024)),
        (png(20_000, 100), (20_000, 100)),
        (gif(300, 200), (300, 200)),
        (webp_vp8x(2048, 4096), (2048, 4096)),
        (webp_vp8(1600, 900), (1600, 900)),
        (webp_vp8l(700, 3000), (700, 3000)),
        (jpeg(4032, 3024), (4032, 3024)),
        (jpeg(1280, 720, frame=0xC2), (1280, 720)),  # progressive
        (jpeg(3000, 4000, exif_bytes=60_000), (3000, 4000)),
    ],
    ids=["png", "png-wide", "gif", "webp-vp8x", "webp-vp8", "webp-vp8l", "jpeg", "jpeg-sof2",
         "jpeg-exif"],
)  # fmt: skip
def test_size_is_read_from_the_header(encoded: bytes, size: tuple[int, int]) -> None:
    assert _media.image_size(_media.Base64Bytes(b64(encoded))) == size
    assert cost(image_url(data_url(encoded))) == _media.image_tokens(*size)


@pytest.mark.parametrize(
    ("detail", "tokens"), [("low", 85), ("high", 1105), ("auto", 1105), (None, 1105)]
)
def test_detail_low_is_85_high_auto_and_none_are_the_tile_formula(
    detail: str | None, tokens: int
) -> None:
    assert cost(image_url(data_url(png(2048, 4096)), detail)) == tokens
    assert cost(image_url(data_url(png(1024, 1024)), detail)) == (85 if detail == "low" else 765)


@pytest.mark.parametrize(
    "part",
    [
        image_url("https://example.com/photo.jpg"),
        {"type": "image_url", "image_url": "https://example.com/photo.jpg"},
        {"type": "image", "url": "https://example.com/a.png"},
        {"type": "image", "source_type": "url", "url": "https://example.com/a.png"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "image", "file_id": "file-1"},
    ],
)
def test_an_image_of_unknown_size_costs_the_default_without_a_download(
    part: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("no download")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert cost(part) == _media.UNKNOWN_IMAGE_TOKENS == 1105
    assert cost(image_url("https://example.com/photo.jpg", "low")) == 85


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png;base64,iVBORw0KGgo=",  # the signature alone
        data_url(png(800, 600)[:20]),  # cut inside IHDR
        data_url(png(800, 600))[:40],  # the text cut short
        "data:image/png;base64,@@@@!!!!",  # not base64
        "data:image/png;base64,ä" + b64(png(800, 600)),  # not ASCII
        data_url(png(0, 0)),  # no pixels
        data_url(b"\xff\xd8" + segment(0xE0, b"") + bytes(40)),  # a JPEG segment not after FF
        data_url(b"\xff\xd8\xff\xe0\x00\x00" + bytes(40)),  # a JPEG segment length below 2
        data_url(b"\xff\xd8" + segment(0xE1, bytes(8)) * 100),  # no frame in the first 64
        data_url(b"BM" + bytes(40)),  # a BMP: not read
        "data:image/png,%89PNG",  # not base64 at all
    ],
)
def test_malformed_data_costs_the_default(url: str) -> None:
    assert cost(image_url(url)) == _media.UNKNOWN_IMAGE_TOKENS


def test_a_huge_image_is_read_from_its_header_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # 30 MB of base64 after a JPEG whose EXIF segment is 60 KB: a few segment headers decoded.
    encoded = jpeg(8000, 6000, exif_bytes=60_000) + bytes(22_000_000)
    url = data_url(encoded, "image/jpeg")
    decoded: list[int] = []
    real = base64.b64decode

    def spy(text: str | bytes, *args: Any, **kwargs: Any) -> bytes:
        decoded.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(base64, "b64decode", spy)
    assert cost(image_url(url)) == _media.image_tokens(8000, 6000) == 765
    assert 0 < sum(decoded) < 200  # characters decoded, of 30 million


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image", "base64": b64(png(2048, 4096)), "mime_type": "image/png"},
        {"type": "image", "source_type": "base64", "data": b64(png(2048, 4096)),
         "mime_type": "image/png"},
        {"type": "image", "url": data_url(png(2048, 4096))},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": b64(png(2048, 4096))}},
    ],
    ids=["v1", "v0", "v1-data-url", "anthropic"],
)  # fmt: skip
def test_standard_blocks_cost_what_chatopenai_sends_for_them(block: dict[str, Any]) -> None:
    sent = sent_request([HumanMessage([TEXT, block])], [])["messages"][0]["content"][1]
    assert sent["type"] == "image_url" and "detail" not in sent["image_url"]  # so: auto
    assert cost(block) == cost(sent) == 1105


def test_a_detail_on_a_standard_block_is_not_honoured_as_chatopenai_drops_it() -> None:
    block = {"type": "image", "base64": b64(png(1024, 1024)), "mime_type": "image/png"}
    assert cost({**block, "detail": "low"}) == 765


def test_audio_costs_its_duration_at_10_tokens_a_second() -> None:
    two_seconds = wav(48_000, 96_000)  # 24 kHz 16-bit mono: its header's byte rate
    openai = {"type": "input_audio", "input_audio": {"data": b64(two_seconds), "format": "wav"}}
    standard = {"type": "audio", "base64": b64(two_seconds), "mime_type": "audio/wav"}
    sent = sent_request([HumanMessage([TEXT, standard])], [])["messages"][0]["content"][1]
    assert sent["type"] == "input_audio"
    assert cost(openai) == cost(standard) == cost(sent) == 20 + 1  # the header's 44 bytes
    mp3 = {"type": "input_audio", "input_audio": {"data": b64(bytes(8_000)), "format": "mp3"}}
    assert cost(mp3) == 20  # no header to read: 32 kbit/s, erring long
    url = {"type": "audio", "source_type": "url", "url": "https://example.com/a.mp3"}
    assert cost(url) == _media.UNKNOWN_AUDIO_TOKENS == 600


def test_a_file_costs_its_pages_estimated_from_its_size() -> None:
    pdf = b"%PDF-1.7\n" + bytes(40_000)  # 3 pages of 16 KiB
    openai = {"type": "file", "file": {"file_data": data_url(pdf, "application/pdf"),
                                       "filename": "a.pdf"}}  # fmt: skip
    standard = {"type": "file", "base64": b64(pdf), "mime_type": "application/pdf",
                "filename": "a.pdf"}  # fmt: skip
    sent = sent_request([HumanMessage([TEXT, standard])], [])["messages"][0]["content"][1]
    assert sent["type"] == "file"
    assert cost(openai) == cost(standard) == cost(sent) == 3 * _media.FILE_PAGE_TOKENS == 5715
    huge = {"type": "file", "base64": b64(bytes(3_000_000)), "mime_type": "application/pdf"}
    assert cost(huge) == 100 * _media.FILE_PAGE_TOKENS  # at most 100 pages a request
    uploaded = {"type": "file", "file": {"file_id": "file-abc"}}
    assert cost(uploaded) == 10 * _media.FILE_PAGE_TOKENS
    text = {"type": "file", "source_type": "text", "text": "plain words", "mime_type": "text/plain"}
    assert cost(text) == cost({"type": "text", "text": "plain words"})


def test_parts_keep_their_shape_when_counted() -> None:
    part = image_url(data_url(png(1024, 1024)), "high")
    before = repr(part)
    assert _framing.content_pieces([TEXT, part, "tail"]) == [TEXT["text"], 765, "tail"]
    assert repr(part) == before


def conversation(rounds: int) -> list[BaseMessage]:
    """A chat in which each question carries a high-detail 1024x1024 photo (765 tokens each)."""
    photo = image_url(data_url(png(1024, 1024)), "high")
    messages: list[BaseMessage] = [SystemMessage("You describe photos.")]
    for r in range(rounds):
        messages += [
            HumanMessage([{"type": "text", "text": f"Photo {r}: what is in it?"}, photo]),
            AIMessage(f"Photo {r} shows a harbour at dusk with {r + 2} boats."),
        ]
    return [*messages, HumanMessage([{"type": "text", "text": "And this one?"}, photo])]


BUDGET = 3000


def test_a_trim_of_high_detail_images_stays_within_the_budget_as_the_server_counts() -> None:
    counter = TokenCounter()
    outcome = PriorityTrimmer(BUDGET, token_counter=counter).trim(conversation(8))
    assert not outcome.over_budget
    assert counter.count_messages(outcome.messages) == outcome.tokens_after <= BUDGET
    assert len(outcome.messages) < 18  # images were dropped to fit: 9 of them are 6,885 tokens


def test_counting_images_at_85_would_overshoot_that_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The old rule: every image part 85 tokens, whatever its detail and size.
    old = _framing.media_tokens
    monkeypatch.setattr(
        _framing, "media_tokens", lambda part: 85 if "image_url" in part else old(part)
    )
    outcome = PriorityTrimmer(BUDGET, token_counter=TokenCounter()).trim(conversation(8))
    assert not outcome.over_budget and outcome.tokens_after <= BUDGET  # so it believed
    monkeypatch.undo()
    sent = TokenCounter().count_messages(outcome.messages)  # as the server counts it
    assert sent > 2 * BUDGET


def test_shortening_a_question_keeps_its_audio_and_file_parts_as_they_are() -> None:
    audio = {
        "type": "input_audio",
        "input_audio": {"data": b64(wav(48_000, 96_000)), "format": "wav"},
    }
    pdf = {"type": "file", "file": {"file_data": data_url(bytes(9_000), "application/pdf")}}
    words = {"type": "text", "text": "Compare the recording with the report. " + "detail " * 900}
    question = HumanMessage([words, audio, pdf])
    counter = TokenCounter()
    assert counter.count_message(question) > 2_800  # 21 + 1,905 + the text
    outcome = PriorityTrimmer(2_400, token_counter=counter).trim([SystemMessage("s"), question])
    shortened = outcome.messages[-1]
    assert shortened is not question and not outcome.over_budget
    assert isinstance(shortened.content, list) and shortened.content[1:] == [audio, pdf]
    assert shortened.text.startswith("Compare the recording with the report.")
    assert counter.count_messages(outcome.messages) == outcome.tokens_after <= 2_400
