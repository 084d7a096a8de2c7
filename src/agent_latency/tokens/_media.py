"""What an image, audio or file part of a message costs, in tokens, estimated offline.

Every figure is a constant below; the sources are in docs/trimming.md ("Images, audio and
files"). Images follow OpenAI's published rule: ``detail: "low"`` costs 85 tokens; ``"high"``,
``"auto"`` (the model may pick low, never more than high) or none scale the image to fit in
2048x2048, then its shortest side down to 768, and cost 85 + 170 per 512-pixel tile. The width
and height of base64 data are read from its PNG, JPEG, GIF or WebP header, decoding only the
bytes of the header (a JPEG's segment headers up to its frame header), never the image; a size
that cannot be read (an http URL, a malformed or unknown header) costs
:data:`UNKNOWN_IMAGE_TOKENS`. Audio and files are estimates: OpenAI publishes no rule for them.

Parts are in OpenAI's shapes (``image_url``, ``input_audio``, ``file`` with ``file_data``),
LangChain's standard blocks (v1 ``base64``/``url``/``file_id``, v0 ``source_type``/``data``) or
Anthropic's image ``source``: the shapes ChatOpenAI sends as OpenAI's.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

LOW_DETAIL_TOKENS: Final = 85
"""An image with ``detail: "low"``, whatever its size; also the base of a high-detail one."""
TILE_TOKENS: Final = 170
"""Each 512-pixel tile of a high-detail image, after :data:`FIT_SIDE` and :data:`SHORT_SIDE`."""
FIT_SIDE, SHORT_SIDE, TILE_SIDE = 2048, 768, 512
UNKNOWN_IMAGE_TOKENS: Final = 1105
"""An image of unknown size: the most an image of aspect ratio up to 2:1 costs in high detail
(3x2 tiles: a 16:9 screenshot, OpenAI's 2048x4096 example; a 4:3 photo costs 765)."""
AUDIO_TOKENS_PER_SECOND: Final = 10
"""Input audio, as OpenAI's audio models count it (1 token per 100 ms)."""
AUDIO_BYTES_PER_SECOND: Final = 4_000
"""Audio whose header gives no byte rate (not WAV): 32 kbit/s, the low end of compressed speech,
so that its duration is not underestimated."""
UNKNOWN_AUDIO_TOKENS: Final = 60 * AUDIO_TOKENS_PER_SECOND
"""Audio without data (a URL or an id): a minute."""
FILE_PAGE_TOKENS: Final = UNKNOWN_IMAGE_TOKENS + 800
"""A page of a file: OpenAI puts an image of each page and its text in the context (a dense
page's text is about 800 tokens)."""
FILE_BYTES_PER_PAGE: Final = 16 * 1024
"""Pages are estimated from a file's size: a compressed text page with its share of fonts."""
FILE_MAX_PAGES: Final = 100
"""The most pages OpenAI reads from the files of one request."""
UNKNOWN_FILE_PAGES: Final = 10
"""A file without data (an uploaded file's id)."""

IMAGE_PART_TYPES: Final = frozenset({"image_url", "image"})
_MAX_SEGMENTS: Final = 64  # a JPEG's segments (or a WAV's chunks) walked before giving up
_JPEG_FRAMES: Final = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOFn, not DHT/JPG/DAC
_JPEG_STANDALONE: Final = frozenset({0x01, *range(0xD0, 0xD8)})  # markers without a length


class Base64Bytes:
    """The bytes of base64 text from ``start``, decoding only the bytes read."""

    __slots__ = ("_start", "_text")

    def __init__(self, text: str, start: int = 0) -> None:
        self._text = text
        self._start = start

    @property
    def size(self) -> int:
        """How many bytes the text encodes (without decoding it)."""
        padding = self._text[-2:].count("=")  # not rstrip: that would copy the text
        return max(0, (len(self._text) - self._start) * 3 // 4 - padding)

    def read(self, offset: int, count: int) -> bytes:
        """Returns up to ``count`` bytes at ``offset``; fewer at the end, none where the text
        is not base64."""
        first, last = offset // 3, -(-(offset + count) // 3)
        chunk = self._text[self._start + 4 * first : self._start + 4 * last]
        try:
            data = base64.b64decode(chunk, validate=True)
        except (binascii.Error, ValueError):  # not base64, or cut short
            return b""
        return data[offset - 3 * first : offset - 3 * first + count]


def media_tokens(part: Mapping[str, Any]) -> int | None:
    """Returns what an image, audio or file part costs, or ``None`` for another part."""
    kind = part.get("type")
    if not isinstance(kind, str) or kind not in _ESTIMATES:
        return None
    inner = part.get(kind)  # OpenAI's shapes nest under their type: {"type": "file", "file": {}}
    if isinstance(inner, str):  # an image_url given as a bare URL
        inner = {"url": inner}
    # Only OpenAI's image_url carries a detail: ChatOpenAI drops one on a standard block.
    block, detail = (inner, inner.get("detail")) if isinstance(inner, Mapping) else (part, None)
    return _ESTIMATES[kind](_data(block), detail)


def image_tokens(width: int, height: int) -> int:
    """Returns OpenAI's cost of an image of this size in high detail."""
    if width <= 0 or height <= 0:
        return UNKNOWN_IMAGE_TOKENS
    long, short = max(width, height), min(width, height)
    if long > FIT_SIDE:  # rounded up throughout, to err toward more tiles
        long, short = FIT_SIDE, -(-short * FIT_SIDE // long)
    if short > SHORT_SIDE:
        long, short = -(-long * SHORT_SIDE // short), SHORT_SIDE
    tiles = -(-long // TILE_SIDE) * -(-short // TILE_SIDE)
    return LOW_DETAIL_TOKENS + TILE_TOKENS * tiles


def image_size(data: Base64Bytes) -> tuple[int, int] | None:
    """Returns ``(width, height)`` from a PNG, GIF, WebP or JPEG header, or ``None``."""
    head = data.read(0, 30)
    try:
        if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
            width, height = struct.unpack(">II", head[16:24])
            return width, height
        if head[:6] in (b"GIF87a", b"GIF89a"):
            width, height = struct.unpack("<HH", head[6:10])
            return width, height
        if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            return _webp_size(head)
    except struct.error:  # cut short
        return None
    return _jpeg_size(data) if head[:2] == b"\xff\xd8" else None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8X" and len(head) >= 30:  # extended: the canvas size, 24 bits each, minus 1
        return 1 + int.from_bytes(head[24:27], "little"), 1 + int.from_bytes(head[27:30], "little")
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":  # lossy: 14 bits each
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and head[20:21] == b"\x2f":  # lossless: 14 bits each, minus 1
        (bits,) = struct.unpack("<I", head[21:25])
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _jpeg_size(data: Base64Bytes) -> tuple[int, int] | None:
    """Walks a JPEG's segment headers (reading 9 bytes of each) to its frame header."""
    offset = 2
    for _ in range(_MAX_SEGMENTS):
        header = data.read(offset, 9)  # FF, marker, length (2), precision, height (2), width (2)
        if len(header) < 4 or header[0] != 0xFF:
            return None
        marker = header[1]
        if marker == 0xFF:  # a fill byte
            offset += 1
        elif marker in _JPEG_STANDALONE:
            offset += 2
        elif marker in _JPEG_FRAMES:
            if len(header) < 9:
                return None
            height, width = struct.unpack(">HH", header[5:9])
            return width, height
        else:
            length = int.from_bytes(header[2:4], "big")
            if length < 2 or marker in (0xD9, 0xDA):  # no frame before the end or the scan
                return None
            offset += 2 + length
    return None


def _wav_byte_rate(data: Base64Bytes) -> int | None:
    """Returns the byte rate of a WAV's ``fmt `` chunk, or ``None``."""
    head = data.read(0, 12)
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    offset = 12
    for _ in range(_MAX_SEGMENTS):
        chunk = data.read(offset, 20)  # id, size, then fmt's format, channels, rate, byte rate
        if len(chunk) < 8:
            return None
        if chunk[:4] == b"fmt ":
            rate = int.from_bytes(chunk[16:20], "little") if len(chunk) == 20 else 0
            return rate or None
        size = int.from_bytes(chunk[4:8], "little")
        offset += 8 + size + (size & 1)
    return None


def _image_cost(data: Base64Bytes | None, detail: object) -> int:
    if detail == "low":
        return LOW_DETAIL_TOKENS
    size = None if data is None else image_size(data)
    return UNKNOWN_IMAGE_TOKENS if size is None else image_tokens(*size)


def _audio_cost(data: Base64Bytes | None, detail: object) -> int:
    if data is None:
        return UNKNOWN_AUDIO_TOKENS
    rate = _wav_byte_rate(data) or AUDIO_BYTES_PER_SECOND
    return max(1, -(-data.size * AUDIO_TOKENS_PER_SECOND // rate))


def _file_cost(data: Base64Bytes | None, detail: object) -> int:
    pages = UNKNOWN_FILE_PAGES if data is None else -(-data.size // FILE_BYTES_PER_PAGE)
    return min(max(pages, 1), FILE_MAX_PAGES) * FILE_PAGE_TOKENS


_ESTIMATES: Final[Mapping[str, Callable[[Base64Bytes | None, object], int]]] = {
    "image_url": _image_cost,  # OpenAI's
    "image": _image_cost,  # LangChain's standard block, Anthropic's
    "input_audio": _audio_cost,  # OpenAI's
    "audio": _audio_cost,  # LangChain's standard block
    "file": _file_cost,  # OpenAI's and LangChain's standard block
}


def _data(block: Mapping[str, Any]) -> Base64Bytes | None:
    """The base64 data of a block (v1 ``base64``, v0 or Anthropic ``data``, OpenAI's
    ``file_data``, or a data URL), or ``None`` where it has none (an http URL, an id)."""
    source = block.get("source")
    if isinstance(source, Mapping):  # Anthropic's
        block = source
    for key in ("base64", "data", "file_data"):
        value = block.get(key)
        if isinstance(value, str):
            return _data_url(value) or Base64Bytes(value)
    url = block.get("url")
    return _data_url(url) if isinstance(url, str) else None


def _data_url(value: str) -> Base64Bytes | None:
    """The data of a ``data:...;base64,`` URL, found without copying it."""
    if not value.startswith("data:"):
        return None
    comma = value.find(",", 0, 256)
    if comma < 0 or not value.endswith(";base64", 0, comma):
        return None
    return Base64Bytes(value, comma + 1)
