"""HostLimits across real processes against the emulator: plain processes sharing a cap never
exceed it (the emulator's list polled during the run), a SIGKILLed holder frees its slot, the
acquire rate spaces the acquires of every process, and two pools sharing a cap finish.

The processes are ``host_limits_child.py``, started as a shell loop starts harnesses: the same
environment for all (``KLAVIS_HOST_MAX_SANDBOXES`` / ``KLAVIS_HOST_MAX_ACQUIRES_PER_SECOND``,
the key, the base URL, the state folder)."""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import workflows
from tests.helpers import expect_children_to_get_sigint, listed_sandboxes
from tests.workflows.live.pool_handle import PoolHandle

CHILD = str(Path(__file__).with_name("host_limits_child.py"))
WAIT = 120  # seconds before a stuck child fails the test (never reached when all is well)


class Children:
    """Child processes whose JSON lines arrive on one queue as ``(index, event)``."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.procs: list[subprocess.Popen[str]] = []
        self.readers: list[threading.Thread] = []
        self.stderr: list[list[str]] = []
        self.events: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue()
        self.seen: list[tuple[int, dict[str, Any]]] = []

    def start(self, *args: str) -> int:
        expect_children_to_get_sigint()  # some tests send it Ctrl-C
        proc = subprocess.Popen(
            [sys.executable, CHILD, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            text=True,
        )
        index = len(self.procs)
        self.procs.append(proc)
        self.stderr.append([])
        for target in (self._read_events, self._read_errors):
            reader = threading.Thread(target=target, args=(index, proc), daemon=True)
            reader.start()
            self.readers.append(reader)
        return index

    def _read_events(self, index: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.events.put((index, json.loads(line)))

    def _read_errors(self, index: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        self.stderr[index].extend(proc.stderr)

    def next_event(self, kind: str) -> tuple[int, dict[str, Any]]:
        """The next event of this kind (every event read is kept in ``seen``)."""
        while True:
            item = self.events.get(timeout=WAIT)
            self.seen.append(item)
            if kind in item[1]:
                return item

    def finish(self, interrupted: frozenset[int] = frozenset()) -> list[str]:
        """Wait for every child to exit and for its pipes to be read; their stderr (the
        ``interrupted`` ones ended by Ctrl-C)."""
        for proc in self.procs:
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()
            proc.wait(timeout=WAIT)
        for reader in self.readers:
            reader.join(timeout=WAIT)
        while True:
            try:
                self.seen.append(self.events.get_nowait())
            except queue.Empty:
                break
        errors = ["".join(lines) for lines in self.stderr]
        for index, (proc, err) in enumerate(zip(self.procs, errors, strict=True)):
            if index in interrupted:
                assert proc.returncode == -signal.SIGINT, err
                assert "KeyboardInterrupt" in err, err
            else:
                assert proc.returncode in (0, -9), err
        return errors

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def children(conn: dict[str, str]) -> Iterator[Children]:
    env = dict(os.environ, KLAVIS_API_KEY=conn["api_key"], KLAVIS_BASE_URL=conn["base_url"])
    env.pop(workflows.HOST_MAX_SANDBOXES_ENV, None)
    env.pop(workflows.HOST_MAX_ACQUIRES_PER_SECOND_ENV, None)
    group = Children(env)  # the state folder is this test's (tests/workflows/conftest.py)
    yield group
    group.kill_all()


class Poller:
    """Lists the emulator's sandboxes of this key, as often as it answers, until stopped."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url, self.token = base_url, token
        self.counts: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.counts.append(len(listed_sandboxes(self.base_url, self.token)))
            self.stop.wait(0.01)  # a pace for the sampling, not a synchronisation

    def __enter__(self) -> Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        self.thread.join(WAIT)


def most_at_once(seen: list[tuple[int, dict[str, Any]]]) -> int:
    """The most sandboxes held at once according to the children's own lines: each is held
    from its ``acquired`` line to its ``releasing`` line (inside the time its slot is held)."""
    edges = []
    for _, event in seen:
        if "acquired" in event:
            edges.append((event["t"], 1))
        elif "releasing" in event:
            edges.append((event["t"], -1))
    held = most = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # a release first on a tie
        held += step
        most = max(most, held)
    return most


def test_three_processes_sharing_a_cap_of_two_never_exceed_it(
    children: Children, conn: dict[str, str], token: str
) -> None:
    children.env[workflows.HOST_MAX_SANDBOXES_ENV] = "2"
    cycles = 4
    with Poller(conn["base_url"], token) as poller:
        for _ in range(3):
            children.start("cycles", str(cycles), "--hold-first")
        holders: set[int] = set()
        while len(holders) < 2:  # two children hold their first sandbox until told to go
            index, _ = children.next_event("acquired")
            holders.add(index)
        at_the_cap = listed_sandboxes(conn["base_url"], token)
        assert len(at_the_cap) == 2  # the third waits for a slot: the cap is reached, not passed
        for proc in children.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.close()
        errors = children.finish()
    acquired = [e for _, e in children.seen if "acquired" in e]
    assert len(acquired) == 3 * cycles, errors
    assert max(poller.counts) <= 2, poller.counts
    assert len(poller.counts) > 1
    assert most_at_once(children.seen) == 2
    assert listed_sandboxes(conn["base_url"], token) == []
    assert all(conn["api_key"] not in err for err in errors)


def test_a_process_killed_while_holding_a_slot_frees_it(
    children: Children, conn: dict[str, str], token: str
) -> None:
    children.env[workflows.HOST_MAX_SANDBOXES_ENV] = "1"
    children.start("hold")
    _, held = children.next_event("acquired")
    children.start("cycles", "1")  # waits for the only slot, held by the first
    killed_at = time.time()
    children.procs[0].kill()  # SIGKILL: no handler runs, the kernel drops its locks
    index, event = children.next_event("acquired")
    assert index == 1
    assert event["t"] > killed_at  # it could not have had the slot while the holder lived
    children.finish()
    assert children.procs[1].returncode == 0
    # the killed holder's sandbox was left behind, as after any SIGKILL: reap finds it
    assert listed_sandboxes(conn["base_url"], token) == [held["acquired"]]
    reaped = workflows.reap(api_key=conn["api_key"], base_url=conn["base_url"])
    assert [r.sandbox_id for r in reaped] == [held["acquired"]]


def test_the_acquire_rate_spaces_the_acquires_of_every_process(
    children: Children, conn: dict[str, str]
) -> None:
    rate = 4.0  # one acquire every 0.25 s, for the two processes together
    children.env[workflows.HOST_MAX_ACQUIRES_PER_SECOND_ENV] = str(rate)
    for _ in range(2):
        children.start("cycles", "3")
    errors = children.finish()
    turns: dict[int, list[float]] = {0: [], 1: []}
    sent: dict[int, list[float]] = {0: [], 1: []}
    for index, event in children.seen:
        if "turn" in event:
            turns[index].append(event["turn"])
        elif "sent" in event:
            sent[index].append(event["sent"])
    assert [len(turns[0]), len(turns[1]), len(sent[0]), len(sent[1])] == [3, 3, 3, 3], errors
    for index in (0, 1):  # each request left after its turn
        assert all(s >= t for t, s in zip(turns[index], sent[index], strict=True))
    every_turn = sorted(turns[0] + turns[1])  # the turns of both processes are spaced
    gaps = [b - a for a, b in itertools.pairwise(every_turn)]
    assert min(gaps) >= 1 / rate - 1e-6, gaps
    # the gaps of the requests as they left are not asserted: a request leaves after its turn
    # by whatever the machine takes to run the process again (measured: 0.25 s +- 0.005 s
    # mostly, one 0.3 s late on a host with a load of 10 on 2 cores)


def test_turns_of_processes_interrupted_while_waiting_are_given_back(
    children: Children, conn: dict[str, str]
) -> None:
    """Three processes wait for their turns behind a first one, at one acquire a minute, and
    are interrupted by Ctrl-C: their turns are given back, so a fifth process waits at most
    one turn (the report: the next process waited 16.6 s behind six dead turns)."""
    spacing = 60.0  # far more than a process takes to start on a loaded machine
    children.env[workflows.HOST_MAX_ACQUIRES_PER_SECOND_ENV] = str(1 / spacing)
    first = children.start("cycles", "1")
    children.next_event("turn")
    waiters = {children.start("cycles", "1") for _ in range(3)}
    turns: dict[int, dict[str, Any]] = {}
    while set(turns) != waiters:  # each logged its turn, just before it waits for it
        index, event = children.next_event("turn")
        turns[index] = event
    assert all(event["turn"] > event["t"] for event in turns.values()), turns  # they wait
    for index in waiters:
        children.procs[index].send_signal(signal.SIGINT)
    for index in waiters:
        children.procs[index].wait(timeout=WAIT)
    late = children.start("cycles", "1")
    index, event = children.next_event("turn")
    assert index == late
    # its turn is the first free one: at most a turn after it asked, not three behind
    assert event["turn"] - event["t"] <= spacing + 1e-6, (turns, event)
    if event["turn"] > event["t"]:  # it waits (a turn, at most): its turn is all we need
        children.procs[late].send_signal(signal.SIGINT)
        waiters.add(late)
    children.finish(interrupted=frozenset(waiters))
    assert children.procs[first].returncode == 0


def test_two_pools_in_two_processes_share_a_cap_and_finish(
    children: Children, conn: dict[str, str], token: str
) -> None:
    """Each pool wants 2 sandboxes, the cap is 2 for both: a worker waiting for a slot takes
    its pool's idle sandbox instead, so neither pool waits for the other forever."""
    children.env[workflows.HOST_MAX_SANDBOXES_ENV] = "2"
    with Poller(conn["base_url"], token) as poller:
        for _ in range(2):
            children.start("pool", "8")
        errors = children.finish()
    reports = [e for _, e in children.seen if "pool" in e]
    assert len(reports) == 2, errors
    assert all(all(report["pool"]) and len(report["pool"]) == 8 for report in reports)
    assert sum(len(report["sandboxes"]) for report in reports) >= 2
    assert max(poller.counts) <= 2, poller.counts
    assert listed_sandboxes(conn["base_url"], token) == []


def test_a_pool_larger_than_the_cap_finishes_on_the_cap(
    make_pool: Callable[..., PoolHandle], conn: dict[str, str], token: str
) -> None:
    """Size 4 under a cap of 2 (both faces): the workers past the cap wait for a slot until one
    of the pool's sandboxes is idle, and take it; none waits for ever on its own pool."""
    limits = workflows.HostLimits(max_sandboxes=2)
    with make_pool(["git"], size=4, host_limits=limits, **conn) as pool:
        results = pool.map(lambda sb, task: sb.id, range(10))
        assert len(listed_sandboxes(conn["base_url"], token)) <= 2
    assert [r.ok for r in results] == [True] * 10
    assert 1 <= len(set(results.values)) <= 2
    assert listed_sandboxes(conn["base_url"], token) == []


def test_the_state_folder_holds_no_key(
    children: Children, conn: dict[str, str], token: str
) -> None:
    children.env[workflows.HOST_MAX_SANDBOXES_ENV] = "1"
    children.env[workflows.HOST_MAX_ACQUIRES_PER_SECOND_ENV] = "50"
    children.start("cycles", "2")
    children.finish()
    state = Path(os.environ["KLAVIS_SANDBOX_STATE_DIR"])
    files = [p for p in state.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"rate", "slot.000.lock", "ledger.jsonl"}
    for path in files:
        assert token not in str(path.relative_to(state))
        assert token.encode() not in path.read_bytes()
