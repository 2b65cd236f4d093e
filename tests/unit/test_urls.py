"""audit/urls.py: what a secrets masker must hide of the endpoints a value holds."""

from __future__ import annotations

import pytest

from audit.urls import redact_url, url_secrets


@pytest.mark.parametrize(
    ("text", "secrets"),
    [
        (
            "redis://:S3cr%40t%2Fpw%23x@127.0.0.1:6379",
            ["S3cr%40t%2Fpw%23x", "S3cr@t/pw#x", "://:S3cr%40t%2Fpw%23x@"],
        ),
        ("mysql://auditor:plain@db:3306/shop", ["plain", "://auditor:plain@"]),
        ("redis://:pa,ss@h:6379", ["pa,ss", "://:pa,ss@"]),  # "," and "'" are legal in a password
        ("['redis://:ab@h:1','redis://:cd@h:2']", ["ab", "://:ab@", "cd", "://:cd@"]),
        ("{sentinels: [10.0.0.1:26379], service: m, password: hunter2pw}", ["hunter2pw"]),
        ("{url: 'redis://:p2@h:2', topology: cluster}", ["p2", "://:p2@"]),
        ("redis://h:1", []),
        ("redis://user@h:1", []),
        ("conn:cache_master", []),
    ],
)
def test_url_secrets_finds_every_password_as_typed_and_decoded(text: str, secrets: list[str]) -> None:
    assert url_secrets(text) == secrets
    if text.startswith("redis://") or text.startswith("mysql://"):  # and redaction hides what was found
        assert not [s for s in secrets if s in redact_url(text)]


def test_a_short_password_is_masked_with_its_user_info() -> None:
    # a masker ignores secrets under 5 characters (Airflow's min_length_masked_secret): the whole
    # `://user:pw@` is long enough
    assert "://:pw@" in url_secrets("redis://:pw@10.0.0.5:6379")
