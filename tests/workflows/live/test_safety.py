"""Guaranteed release, and the API key never showing: repr, logs, errors, subprocess exits."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import workflows
from klavis_emulator import EmulatorServer
from tests.helpers import Face, expect_children_to_get_sigint, listed_sandboxes
from workflows import ApiKey


def test_keyboard_interrupt_inside_with_releases(
    face: Face, conn: dict[str, str], token: str
) -> None:
    with pytest.raises(KeyboardInterrupt), face.acquire(["git"], **conn) as sb:
        sb.seed({"a.txt": "a"})
        raise KeyboardInterrupt
    assert listed_sandboxes(conn["base_url"], token) == []


def test_an_error_inside_with_releases_and_propagates(
    face: Face, conn: dict[str, str], token: str
) -> None:
    with pytest.raises(ZeroDivisionError), face.acquire(["git"], **conn):
        _ = 1 / 0
    assert listed_sandboxes(conn["base_url"], token) == []


def test_ledger_records_and_reap_releases(face: Face, conn: dict[str, str], token: str) -> None:
    kept = face.acquire(["git"], **conn)  # never released by this test
    held = workflows.default_ledger().held(base_url=conn["base_url"])
    assert [e.sandbox_id for e in held] == [kept.id]
    assert token not in workflows.default_ledger().path.read_text()
    results = face.reap(**conn)
    assert [(r.sandbox_id, r.ok) for r in results] == [(kept.id, True)]
    assert workflows.default_ledger().held(base_url=conn["base_url"]) == []
    assert listed_sandboxes(conn["base_url"], token) == []
    workflows._ownership.forget(kept.id, kept.settings)


def test_key_never_in_repr_logs_or_errors(
    face: Face, conn: dict[str, str], emulator: EmulatorServer, caplog: pytest.LogCaptureFixture
) -> None:
    secret = conn["api_key"]
    caplog.set_level(logging.DEBUG)
    with face.acquire(["git"], **conn) as sb:
        sb.seed({"a.txt": "a"})
        sb.dump()
        texts = [repr(sb), repr(sb.settings), repr(sb.info), str(sb.settings.api_key)]
    with pytest.raises(workflows.NotFoundError) as caught:
        face.attach("00000000-0000-4000-8000-00000000beef", **conn)
    texts += [str(caught.value), repr(caught.value)]
    texts += [r.getMessage() for r in caplog.records]
    assert any("/dump" in t for t in texts)
    for text in texts:
        assert secret not in text
        assert "signature=" not in text
        assert "Bearer" not in text


def test_api_key_object_hides_itself() -> None:
    key = ApiKey("sk-very-secret")
    assert "sk-very-secret" not in f"{key!r} {key} {key:>20}"
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(key)


_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from workflows import LocalSandbox, bulk_acquire
    conn = {"api_key": os.environ["K"], "base_url": os.environ["U"]}
    if sys.argv[1] == "bulk":  # acquired in worker threads: SIGTERM must still release them
        batch = bulk_acquire(["git"], 2, progress=False, **conn)
        print(" ".join(sb.id for sb in batch.sandboxes), flush=True)
        sys.stdin.readline()
        sys.exit(0)
    sb = LocalSandbox.acquire(["git"], **conn)
    print(sb.id, flush=True)
    if sys.argv[1] == "with":
        with sb:
            sys.stdin.readline()  # blocks until the parent signals us
    else:
        sys.stdin.readline()
    """
)


@pytest.mark.parametrize(
    ("how", "sig"),
    [
        ("with", signal.SIGINT),
        ("with", signal.SIGTERM),
        ("bare", signal.SIGTERM),
        ("bare", None),
        ("bulk", signal.SIGTERM),
    ],
)
def test_process_exit_and_signals_release(
    conn: dict[str, str], token: str, tmp_path: Path, how: str, sig: signal.Signals | None
) -> None:
    env = dict(os.environ, K=conn["api_key"], U=conn["base_url"])
    env["KLAVIS_SANDBOX_STATE_DIR"] = str(tmp_path / "child-state")
    expect_children_to_get_sigint()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdin is not None
    sandbox_ids = child.stdout.readline().split()
    assert sorted(listed_sandboxes(conn["base_url"], token)) == sorted(sandbox_ids)
    assert len(sandbox_ids) == (2 if how == "bulk" else 1)
    if sig is None:
        # the script ends normally without releasing: atexit must
        _, err = child.communicate(input="\n", timeout=60)
    else:
        child.send_signal(sig)
        _, err = child.communicate(timeout=60)
    assert conn["api_key"] not in err
    assert listed_sandboxes(conn["base_url"], token) == [], err


def test_reap_spares_live_processes_and_dry_run(
    conn: dict[str, str], token: str, tmp_path: Path
) -> None:
    env = dict(os.environ, K=conn["api_key"], U=conn["base_url"])
    env["KLAVIS_SANDBOX_STATE_DIR"] = os.environ["KLAVIS_SANDBOX_STATE_DIR"]
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, "bare"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert child.stdout is not None
    sandbox_id = child.stdout.readline().strip()
    try:
        key, url = conn["api_key"], conn["base_url"]
        assert workflows.reap(api_key=key, base_url=url) == []  # owner alive: in use, not leaked
        planned = workflows.reap(dry_run=True, include_live=True, api_key=key, base_url=url)
        assert [r.sandbox_id for r in planned] == [sandbox_id]
        assert listed_sandboxes(conn["base_url"], token) == [sandbox_id]
        results = workflows.reap(include_live=True, api_key=key, base_url=url)
        assert [(r.sandbox_id, r.ok) for r in results] == [(sandbox_id, True)]
    finally:
        child.communicate(input="\n", timeout=60)
    assert listed_sandboxes(conn["base_url"], token) == []
