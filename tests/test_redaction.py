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
