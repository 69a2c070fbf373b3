"""Issue 35, point 1: ``reap`` spares what is meant to live. A sandbox acquired to outlive its
command (``ID=$(klavis-sandbox acquire ...)`` in a shell script, ``acquire(..., detach=True)``
in Python) is released by its TTL or by id, never by ``reap`` unless ``--include-detached``;
a crashed script's sandboxes are still reaped. Driven as a user drives them: the installed
``klavis-sandbox`` from bash, Python scripts in child processes, the session emulator."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from workflows import Ledger, LedgerEntry, LocalSandbox, default_ledger, list_sandboxes

BIN = Path(sys.executable).parent  # where the install put `klavis-sandbox`


@pytest.fixture
def env(conn: dict[str, Any]) -> dict[str, str]:
    """A user's shell: the CLI on PATH, pointed at the emulator as this test's tenant (the
    ledger is the test's own: ``KLAVIS_SANDBOX_STATE_DIR`` from the autouse fixture)."""
    assert (BIN / "klavis-sandbox").exists()
    return {
        **os.environ,
        "KLAVIS_API_KEY": conn["api_key"],
        "KLAVIS_BASE_URL": conn["base_url"],
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }


def _bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


def _listed(conn: dict[str, Any]) -> list[str]:
    return [info.id for info in list_sandboxes(**conn)]


def test_reap_spares_what_a_shell_script_acquired_and_lists_it_apart(
    env: dict[str, str], conn: dict[str, Any]
) -> None:
    done = _bash(
        """
        ID=$(klavis-sandbox acquire filesystem --ttl 600 -q)
        echo "$ID"
        klavis-sandbox reap                   # the acquire's process has ended: not a leftover
        klavis-sandbox get "$ID" -q > /dev/null && echo "still there"
        klavis-sandbox reap --dry-run         # stdout: what it would release (nothing)
        klavis-sandbox reap --json -q
        """,
        env,
    )
    assert done.returncode == 0, done.stderr
    sandbox_id, still, *rest = done.stdout.splitlines()
    assert still == "still there"
    assert json.loads("\n".join(rest)) == [
        {
            "sandbox_id": sandbox_id,
            "outcome": "detached",
            "error": None,
            "base_url": conn["base_url"],
            "expires": default_ledger().held()[0].expires,
        }
    ]
    kept = [line for line in done.stderr.splitlines() if line.startswith("kept ")]
    assert len(kept) == 2  # reap and reap --dry-run; -q silences the third
    assert kept[0].startswith(f"kept {sandbox_id}: detached, expires in 10 min")
    assert f"klavis-sandbox release {sandbox_id}" in kept[0]
    assert _listed(conn) == [sandbox_id]

    released = _bash("klavis-sandbox reap --include-detached --json -q", env)
    assert released.returncode == 0, released.stderr
    assert json.loads(released.stdout) == [
        {"sandbox_id": sandbox_id, "outcome": "released", "error": None}
    ]
    assert _listed(conn) == []
    assert default_ledger().held() == []


def test_a_detached_sandbox_ends_by_release_by_id_and_no_ttl_is_said(
    env: dict[str, str], conn: dict[str, Any]
) -> None:
    done = _bash(
        """
        ID=$(klavis-sandbox acquire git --ttl never -q)
        klavis-sandbox reap
        klavis-sandbox release "$ID"
        klavis-sandbox reap
        """,
        env,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "detached, no TTL: it lives until released" in lines[0]
    assert lines[1].startswith("released ")
    assert lines[2] == "nothing to release"
    assert _listed(conn) == []


def test_the_library_detaches_a_sandbox_that_outlives_its_script_and_reap_keeps_it(
    env: dict[str, str], conn: dict[str, Any], tmp_path: Path
) -> None:
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
            from workflows import LocalSandbox

            with LocalSandbox.acquire(["filesystem"], ttl_seconds=900, detach=True) as sb:
                sb.seed({"kept.txt": "for later"})
                print(sb.id, sb.owned)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    sandbox_id, owned = done.stdout.split()
    assert owned == "False"  # leaving `with` and the interpreter's exit leave it alone
    assert _listed(conn) == [sandbox_id]

    reaped = _bash("klavis-sandbox reap", env)
    assert reaped.returncode == 0, reaped.stderr
    assert f"kept {sandbox_id}: detached, expires in 15 min" in reaped.stderr
    with LocalSandbox.attach(sandbox_id, **conn) as sb:
        assert sb.dump() == {"kept.txt": "for later"}
        assert sb.release()  # by id, elsewhere: the ledger is settled by the release command
    assert _bash(f"klavis-sandbox release {sandbox_id} --ignore-not-found -q", env).returncode == 0
    assert default_ledger().held() == []


def test_a_crashed_scripts_sandboxes_are_still_reaped(
    env: dict[str, str], conn: dict[str, Any], tmp_path: Path
) -> None:
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            from workflows import LocalSandbox

            sb = LocalSandbox.acquire(["filesystem"], ttl_seconds=900)
            kept = LocalSandbox.acquire(["git"], ttl_seconds=900, detach=True)
            print(sb.id, kept.id, flush=True)
            os.kill(os.getpid(), 9)  # no exit handler runs: a crash
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    crashed, detached = done.stdout.split()
    assert sorted(_listed(conn)) == sorted([crashed, detached])

    reaped = _bash("klavis-sandbox reap --json", env)
    assert reaped.returncode == 0, reaped.stderr
    outcomes = {r["sandbox_id"]: r["outcome"] for r in json.loads(reaped.stdout)}
    assert outcomes == {crashed: "released", detached: "detached"}
    assert _listed(conn) == [detached]
    LocalSandbox.attach(detached, **conn).release()


def test_a_detached_sandbox_whose_ttl_is_over_is_a_leftover_again(tmp_path: Path) -> None:
    """Past its TTL the service has released it: reap settles its entry (a 404 counts as
    released). Entries written by versions without the field are leftovers as before."""
    book = Ledger(tmp_path / "ledger.jsonl")
    for sandbox_id, ttl in (("over", 60), ("running", 600), ("forever", None)):
        book.record("acquired", sandbox_id, base_url="u", key="k", detached=True, ttl_seconds=ttl)
    book.record("acquired", "old-style", base_url="u", key="k")
    entries = {e.sandbox_id: e for e in book.held()}
    later = datetime.now(timezone.utc) + timedelta(seconds=120)
    assert {name: e.spared(later) for name, e in entries.items()} == {
        "over": False,
        "running": True,
        "forever": True,
        "old-style": False,
    }
    assert entries["forever"].expires_in() is None
    running = entries["running"].expires_in(later)
    assert running is not None
    assert 470 < running <= 480
    assert entries["old-style"] == LedgerEntry(
        "old-style", "u", "k", os.getpid(), entries["old-style"].time
    )
