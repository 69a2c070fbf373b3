"""The ledger in a state folder others reach never writes through their links, never reads
their files, never hangs on a FIFO (issue 32's round on the state folder: the host limits' files
had these holes, and the ledger beside them had them too). It never breaks the work it records
either: a ledger it cannot use is skipped, with a warning naming it.

Another user's moves are made by a real second user (``nobody``, through ``setpriv``), as in
``test_host_limits_hostile.py``; the FIFO and link cases by this user."""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from tests.workflows.test_host_limits_hostile import OtherUser, intact, other_user, shared, victim
from workflows._ownership._ledger import Ledger

__all__ = ["other_user", "shared", "victim"]  # the fixtures this module takes from there

WAIT = 60.0  # seconds before a hang fails a test (never reached when all is well)


def record_and_read(ledger: Ledger) -> list[object]:
    """What a process does with its ledger: record an acquire, then read what is held."""
    ledger.record("acquired", "sandbox-a", base_url="http://x", key="k")
    return list(ledger.held())


def test_another_users_link_in_a_shared_folder_is_never_written_through(
    other_user: OtherUser, shared: Path, victim: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = shared / "state"
    other_user.run(f"mkdir -m 0777 '{state}'\nln -s '{victim}' '{state}/ledger.jsonl'")
    with caplog.at_level(logging.WARNING, logger="workflows"):
        assert record_and_read(Ledger(state / "ledger.jsonl")) == []
    assert intact(victim)
    assert "state: it is owned by another user (uid" in caplog.text


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_link_in_the_ledgers_place_is_never_followed(
    tmp_path: Path, victim: Path, link: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    place = folder / "ledger.jsonl"
    if link == "symbolic":
        place.symlink_to(victim)
    else:
        os.link(victim, place)
    with caplog.at_level(logging.WARNING, logger="workflows"):
        assert record_and_read(Ledger(place)) == []
    assert intact(victim)
    assert ("it is a link" if link == "symbolic" else "it has 2 links") in caplog.text


def test_a_fifo_in_the_ledgers_place_is_skipped_never_waited_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    place = tmp_path / "ledger.jsonl"
    os.mkfifo(place)
    done = threading.Event()
    seen: list[object] = []

    def work() -> None:
        seen.extend(record_and_read(Ledger(place)))
        done.set()

    with caplog.at_level(logging.WARNING, logger="workflows"):
        threading.Thread(target=work, daemon=True).start()
        assert done.wait(WAIT), "the ledger waited on a FIFO"
    assert seen == []
    assert "it is not a regular file" in caplog.text


def test_a_ledger_others_may_write_is_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.record("acquired", "sandbox-a", base_url="http://x", key="k")
    assert [entry.sandbox_id for entry in ledger.held()] == ["sandbox-a"]
    assert stat.S_IMODE(ledger.path.stat().st_mode) == 0o600  # made private
    ledger.path.chmod(0o666)  # anyone could have written lines into it
    with caplog.at_level(logging.WARNING, logger="workflows"):
        assert list(ledger.held()) == []
    assert "others can write it (mode 0666)" in caplog.text
