"""``reap`` when the ledger recorded sandboxes for a base URL that is not the one it is pointed
at, or that no longer answers (issue 25, point 4): real emulators on loopback port 0, stopped
and restarted over the same data folder as ``klavis-emulator --port 0`` is."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path
from typing import NamedTuple

import pytest

import workflows
from tests.helpers import Face
from workflows import Ledger, LocalSandbox, default_ledger, list_sandboxes
from workflows._cli import main
from workflows._ownership._reach import probe


class Ran(NamedTuple):
    code: int
    out: str
    err: str


def cli(*argv: str) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture
def key(token: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("KLAVIS_API_KEY", token)
    return token


@pytest.fixture
def restartable(tmp_path: Path) -> Path:
    """A data folder for emulators started and stopped in the test."""
    return tmp_path / "emulator-data"


def _leaked(base_url: str) -> str:
    """A sandbox acquired at ``base_url`` and never released, as by a killed script (the
    CLI's ``acquire`` is detached: reap would keep it)."""
    sb = LocalSandbox.acquire(["git"], base_url=base_url, progress=False)
    workflows._ownership.forget(sb.id, sb.settings)
    return sb.id


def _held(book: Ledger, token: str) -> list[tuple[str, str]]:
    fingerprint = workflows.ApiKey(token).fingerprint
    return [(e.base_url, e.sandbox_id) for e in book.held(key=fingerprint)]


def test_reap_after_a_restart_on_another_port_releases_there(key: str, restartable: Path) -> None:
    from klavis_emulator import EmulatorConfig, EmulatorServer

    config = EmulatorConfig(data_dir=restartable, mcp_at_acquire=False)
    with EmulatorServer(config) as first:
        old = first.base_url
        sandbox_id = _leaked(old)
    # the first emulator is gone: its URL refuses connections
    ran = cli("reap", "--base-url", old)
    assert ran.code == 1  # the service it was pointed at did not answer
    assert f"1 sandbox recorded for {old}, which did not answer (connection refused)" in ran.err
    assert "reap --forget" in ran.err
    assert _held(default_ledger(), key) == [(old, sandbox_id)]  # kept

    with EmulatorServer(config) as second:  # the same data folder, another port
        new = second.base_url
        assert new != old
        listed = cli("list", "--base-url", new)  # the global option after the command
        assert sandbox_id in listed.out
        dry = cli("reap", "--dry-run", "--base-url", new)
        assert dry == (0, f"{sandbox_id}\n", "")
        ran = cli("reap", "--json", "--base-url", new)
        assert ran.code == 0, ran.err
        assert json.loads(ran.out) == [
            {"sandbox_id": sandbox_id, "outcome": "released", "error": None}
        ]
        assert list_sandboxes(api_key=key, base_url=new) == []
        assert cli("reap", "--base-url", new) == (0, "", "nothing to release\n")
    assert _held(default_ledger(), key) == []  # settled under the URL it was recorded for
    assert cli("reap", "--base-url", old) == (0, "", "nothing to release\n")


def test_entries_of_a_gone_service_are_kept_then_forgotten_on_request(
    key: str, conn: dict[str, str], restartable: Path
) -> None:
    from klavis_emulator import EmulatorConfig, EmulatorServer

    with EmulatorServer(EmulatorConfig(data_dir=restartable, mcp_at_acquire=False)) as gone:
        old = gone.base_url
        sandbox_id = _leaked(old)
    here = conn["base_url"]  # another service, which answers and never had that sandbox
    ran = cli("reap", "--json", "--base-url", here)
    assert ran.code == 0, ran.err  # entries of another service do not fail the reap
    assert f"1 sandbox recorded for {old}, which did not answer (connection refused): kept" in (
        ran.err
    )
    assert json.loads(ran.out) == [
        {
            "sandbox_id": sandbox_id,
            "outcome": "kept",
            "error": "connection refused",
            "base_url": old,
        }
    ]
    assert _held(default_ledger(), key) == [(old, sandbox_id)]

    assert cli("reap", "--forget", "--dry-run", "--base-url", here).code == 0
    assert _held(default_ledger(), key) == [(old, sandbox_id)]  # a dry run forgets nothing

    ran = cli("reap", "--forget", "--base-url", here)
    assert ran.code == 0, ran.err
    assert f"forgot 1 sandbox recorded for {old}, which is gone (connection refused)" in ran.err
    assert _held(default_ledger(), key) == []
    assert cli("reap", "--base-url", old) == (0, "", "nothing to release\n")


def test_forget_never_drops_what_a_service_that_answers_holds(
    face: Face, key: str, conn: dict[str, str], restartable: Path
) -> None:
    from klavis_emulator import EmulatorConfig, EmulatorServer

    with EmulatorServer(EmulatorConfig(data_dir=restartable, mcp_at_acquire=False)) as other:
        there = other.base_url
        held = LocalSandbox.acquire(["git"], api_key=key, base_url=there, progress=False)
        held_id = held.id
        workflows._ownership.forget(held_id, held.settings)  # leaked, as by a killed process
        # one recorded for the session emulator and released behind the ledger's back: that
        # service answers 404 for it, the normal "already gone"
        gone = LocalSandbox.acquire(["git"], api_key=key, base_url=conn["base_url"])
        LocalSandbox.attach(gone.id, api_key=key, base_url=conn["base_url"]).release()
        workflows._ownership.forget(gone.id, gone.settings)

        results = face.reap(api_key=key, base_url=conn["base_url"], forget_unreachable=True)
        assert [(r.sandbox_id, r.ok, r.already_released) for r in results] == [
            (gone.id, True, True)
        ]
        [group] = results.unreleased
        assert (group.base_url, group.sandbox_ids, group.answered) == (there, (held_id,), True)
        assert not group.forgotten
        assert _held(default_ledger(), key) == [(there, held_id)]  # kept: its service answers

        ran = cli("reap", "--forget", "--base-url", conn["base_url"])
        assert ran.code == 0
        assert f"1 sandbox recorded for {there}, another service, which answers: kept" in ran.err
        assert f"reap --base-url {there}" in ran.err
        assert [i.id for i in list_sandboxes(api_key=key, base_url=there)] == [held_id]

        ran = cli("reap", "--base-url", there)
        assert (ran.code, ran.err) == (0, f"released {held_id}\n")
    assert _held(default_ledger(), key) == []


def test_the_service_pointed_at_can_be_forgotten_once_gone(face: Face, key: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
        book = default_ledger()
        fingerprint = workflows.ApiKey(key).fingerprint
        sandbox_id = "00000000-0000-4000-8000-00000000abcd"
        book.record("acquired", sandbox_id, base_url=dead, key=fingerprint)
        book.record_attempt(
            "feed",
            base_url=dead,
            key=fingerprint,
            servers=("git",),
            benchmark=None,
            known=frozenset(),
        )

        results = face.reap(api_key=key, base_url=dead)
        assert list(results) == []
        [group] = results.unreleased
        assert (group.pointed_at, group.answered, group.gone, group.forgotten) == (
            True,
            False,
            True,
            False,
        )
        assert (group.sandbox_ids, group.attempts) == ((sandbox_id,), ("feed",))
        ran = cli("reap", "--base-url", dead)
        assert ran.code == 1
        assert "1 sandbox and 1 unfinished acquire recorded for" in ran.err

        ran = cli("reap", "--forget", "--base-url", dead)
        assert ran.code == 0, ran.err
        assert "forgot 1 sandbox and 1 unfinished acquire" in ran.err
        assert book.held(key=fingerprint) == []
        assert book.open_attempts(key=fingerprint) == []
        assert cli("reap", "--base-url", dead) == (0, "", "nothing to release\n")


def test_a_probe_tells_gone_from_answering_without_the_key(
    conn: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reach = probe(conn["base_url"])
    assert (reach.answered, reach.gone) == (True, False)  # any HTTP answer, a 404 included
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{sock.getsockname()[1]}"
        reach = probe(refused)
        assert (reach.answered, reach.reason, reach.gone) == (False, "connection refused", True)
        # through a proxy, a refusal is the proxy's: it proves nothing about the service
        monkeypatch.setenv("HTTP_PROXY", refused)
        monkeypatch.setenv("NO_PROXY", "")
        reach = probe("http://gone.example")
        assert (reach.answered, reach.gone) == (False, False)
    monkeypatch.delenv("HTTP_PROXY")
    reach = probe("http://no-such-host.invalid")  # RFC 6761: .invalid never resolves
    assert (reach.answered, reach.reason, reach.gone) == (False, "no such host", True)


def test_release_by_id_after_a_restart_settles_the_old_entry(key: str, restartable: Path) -> None:
    from klavis_emulator import EmulatorConfig, EmulatorServer

    config = EmulatorConfig(data_dir=restartable, mcp_at_acquire=False)
    with EmulatorServer(config) as first:
        old = first.base_url
        sandbox_id = cli("acquire", "git", "-q", "--base-url", old).out.strip()
    with EmulatorServer(config) as second:
        new = second.base_url
        assert cli("release", sandbox_id, "--base-url", new) == (0, "", f"released {sandbox_id}\n")
    assert _held(default_ledger(), key) == []  # reap has nothing left to report
    assert cli("reap", "--base-url", new) == (0, "", "nothing to release\n")


def test_reap_takes_its_keywords_once_and_refuses_others(face: Face) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'forget'"):
        face.reap(forget=True)
    assert set(workflows.ReapOptions.__optional_keys__) == {
        "api_key",
        "base_url",
        "ledger",
        "include_live",
        "include_detached",
        "dry_run",
        "forget_unreachable",
        "concurrency",
        "progress",
    }
