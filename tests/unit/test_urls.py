"""audit/urls.py: what a secrets masker must hide of the endpoints a value holds."""

from __future__ import annotations

import pytest

from audit.errors import ConfigError
from audit.urls import checked_url, redact_url, shown_server_url, url_secrets


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


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:0", "mysql://auditor:pw@db:0/shop", "redis://h:65536", "redis://h:x"]
)
def test_a_port_that_is_no_server_port_is_refused(url: str) -> None:
    # redis://h:0 was audited as redis://h:6379 (the client reads port 0 as "none"): another server
    with pytest.raises(ConfigError, match="the port must be a number from 1 to 65535"):
        checked_url(url)


def test_a_url_without_a_port_keeps_the_default() -> None:
    assert checked_url("redis://127.0.0.1") == "redis://127.0.0.1"


@pytest.mark.parametrize("url", ["auditor:s3cretpw@10.0.0.5:3306", ":s3cretpw@h:6379", "redis:/:s3cretpw@h"])
def test_a_url_without_its_scheme_is_shown_without_its_password(url: str) -> None:
    # `u:pw@host:port` (a scheme left out of AIRFLOW_CONN_<ID>) was shown whole: the masking began after a ":" or "/"
    assert "s3cretpw" not in redact_url(url) and "***@" in redact_url(url)


def test_a_server_value_that_is_no_url_is_not_shown() -> None:
    # a password pasted into AIRFLOW_CONN_<ID> is no URL: it was quoted as "s3cretpw is not a Redis URL"
    assert "s3cretpw" not in shown_server_url("s3cretpw")
    assert shown_server_url("redis://:s3cretpw@h:1") == "redis://:***@h:1"
