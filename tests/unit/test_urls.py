"""audit/urls.py: what a secrets masker must hide of the endpoints a value holds."""

from __future__ import annotations

import pytest

from audit.urls import redact_url, url_secrets


@pytest.mark.parametrize(
    ("text", "secrets"),
    [
        ("redis://:S3cr%40t%2Fpw%23x@127.0.0.1:6379", ["S3cr%40t%2Fpw%23x", "S3cr@t/pw#x"]),
        ("mysql://auditor:plain@db:3306/shop", ["plain"]),
        ("{url: 'redis://u:a@b@h:1', sentinels: ['redis://:p2@h:2', 'h:3']}", ["a@b", "p2"]),
        ("redis://h:1", []),
        ("redis://user@h:1", []),
        ("conn:cache_master", []),
    ],
)
def test_url_secrets_finds_every_password_as_typed_and_decoded(text: str, secrets: list[str]) -> None:
    assert url_secrets(text) == secrets
    for secret in secrets:  # and redaction hides what was found
        if "://" in text and "{" not in text:
            assert secret not in redact_url(text)
