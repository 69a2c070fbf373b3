"""The broker's settings, checked before anything is sent (no Ray cluster): ``BrokerConfig``'s
values, ``Warm``'s, and what a lease and a warm sandbox must share to fit."""

from __future__ import annotations

from typing import Any

import pytest

from workflows import InvalidInputError
from workflows.ray import Warm
from workflows.ray._types import Settings, check_config, lease_key


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ({"max_sandboxes": 0}, "max_sandboxes must be at least 1"),
        ({"max_sandboxes": True}, "max_sandboxes must be an int"),
        ({"max_acquires_per_second": -1}, "max_acquires_per_second must be a positive"),
        ({"lease_timeout": 0}, "lease_timeout must be a positive"),
        ({"warm": ["filesystem"]}, "warm takes Warm"),
        ({"cap": 3}, "no setting"),
    ],
)
def test_bad_settings_are_refused_naming_them(given: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        check_config(given)


def test_settings_given_override_and_none_is_no_limit() -> None:
    settings = Settings().updated({"max_sandboxes": 16, "max_acquires_per_second": 2})
    assert (settings.max_sandboxes, settings.max_acquires_per_second) == (16, 2.0)
    assert settings.updated({"max_acquires_per_second": None}).max_acquires_per_second is None
    assert settings.updated({}).lease_timeout == 30.0
    one = Warm(["git"], 2)
    assert settings.updated({"warm": one}).warm == (one,)
    assert settings.updated({"warm": None}).warm == ()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((["filesystm"], 1), "filesystm"),
        (("git", 1), "list of names"),
        ((["git"], -1), "count must be an int >= 0"),
        ((["git"], 1.5), "count must be an int >= 0"),
    ],
)
def test_a_bad_warm_spec_is_refused(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        Warm(*args)


def test_a_warm_template_must_be_files_and_idle_timeout_positive() -> None:
    with pytest.raises(InvalidInputError, match="template must be a mapping"):
        Warm(["git"], 1, template="a.txt")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="idle_timeout"):
        Warm(["git"], 1, idle_timeout=0)


def test_a_lease_fits_a_warm_kind_by_servers_benchmark_account_and_url() -> None:
    warm = Warm(["git", "filesystem"], 2, base_url="http://svc/")
    same = lease_key(["filesystem", "git"], {"ttl_seconds": 60}, "http://svc")
    assert warm.key("http://other") == same  # the order of names and the TTL do not matter
    assert lease_key(["git"], {}, "http://svc") != same
    assert lease_key(["filesystem", "git"], {}, "http://elsewhere") != same
    assert lease_key(["filesystem", "git"], {"test_account_email": "a@b.c"}, "http://svc") != same
    assert Warm("ALL", 1).key("http://svc") == lease_key("ALL", {}, "http://svc")
    assert Warm(["git"], 1) == Warm(("git",), 1)  # settings compare equal as connect compares
