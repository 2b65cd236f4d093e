"""audit/kernel/identity.py: a pair whose two endpoints reach one server is refused; no identity, no verdict."""

from __future__ import annotations

import pytest

from audit.errors import ConfigError
from audit.kernel.identity import refuse_one_server


def test_one_identity_on_both_sides_is_refused_naming_the_pair_and_the_identity() -> None:
    with pytest.raises(ConfigError, match=r"pair p: both endpoints reach one server \(run_id abc\)"):
        refuse_one_server("p", {"master": "abc", "replica": "abc"}, "run_id")


@pytest.mark.parametrize(
    "identities",
    [
        {"master": "abc", "replica": "def"},  # two servers
        {"master": "abc", "replica": None},  # a side that shows none proves nothing either way
        {"master": None, "replica": None},
        {"master": "", "replica": ""},
    ],
)
def test_different_or_unknown_identities_pass(identities: dict[str, str | None]) -> None:
    refuse_one_server("p", identities, "run_id")
