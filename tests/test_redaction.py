"""Secrets stay out of what is shown: URLs with credentials, server messages echoing keys."""

from agent_latency._redaction import display_url, redact


def test_display_url_drops_user_info_query_and_fragment() -> None:
    shown = display_url("https://user:sk-secret@api.example.com:8443/v1?api-key=sk-2#x")
    assert shown == "https://api.example.com:8443/v1"
    assert display_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"


def test_display_url_of_an_unparsable_url_shows_no_part_of_it() -> None:
    assert display_url("http://user:pw@[::1") == "http:<unparsable URL>"


def test_redact_masks_the_key_and_key_shaped_words() -> None:
    text = "Incorrect API key provided: sk-agent****9f8e. Your key sk-live-123456 is wrong"
    shown = redact(text, "sk-live-123456")
    assert "sk-live-123456" not in shown and "sk-agent" not in shown
    assert shown.startswith("Incorrect API key provided: ***")
    assert redact("no secrets here") == "no secrets here"


def test_redact_masks_a_header_quoted_by_httpx() -> None:
    # httpx refuses a key ending in a newline and quotes the whole header in its error.
    error = "LocalProtocolError: Illegal header value b'Bearer plainkey4c1d9e7b\\n'"

    shown = redact(error)

    assert "plainkey4c1d9e7b" not in shown
    assert shown == "LocalProtocolError: Illegal header value b'Bearer ***'"


def test_redact_masks_the_escaped_form_of_a_secret() -> None:
    assert redact("got 'abc\\n123'", "abc\n123") == "got '***'"


def test_redact_masks_header_lines_but_not_prose() -> None:
    text = "echo: Authorization: Bearer abc, api-key=xyz9, X-Api-Key: q | the bearer of news"

    assert redact(text) == (
        "echo: Authorization: ***, api-key=***, X-Api-Key: *** | the bearer of news"
    )


def test_display_url_drops_user_info_without_a_scheme() -> None:
    assert display_url("user:pw@api.example.com/v1") == "api.example.com/v1"
