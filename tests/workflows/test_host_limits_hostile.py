"""HostLimits in a state folder it cannot trust, and its rate file against a clock set back and
waits that are interrupted (issue 32, point 3).

Another user's moves are made by a real second user (``nobody``, through ``setpriv``: the
tests run as root here); links, hard links and FIFOs are real ones. The victim is a 0600 file
of this user's that the limits must never open."""

from __future__ import annotations

import logging
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from workflows import ConfigurationError, HostLimits, Settings
from workflows._config import ApiKey
from workflows._flows import Sleep
from workflows._host_limits import (
    _reserve_turn,
    acquire_turn,
    host_slot,
    limits_folder,
    release_host_slot,
)
from workflows._host_limits_files import LimitsFolder
from workflows._host_limits_turns import Reservation, parse

PRECIOUS = "precious: root's own 0600 file\n"
CAPPED = HostLimits(max_sandboxes=2)
RATED = HostLimits(max_acquires_per_second=0.01)  # one turn every 100 s: never waited for
WAIT = 60.0  # seconds before a hang fails a test (never reached when all is well)


@pytest.fixture
def settings() -> Settings:
    return Settings(api_key=ApiKey("sk-hostile-0123456789"), base_url="http://127.0.0.1:1")


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim" / "secret"
    path.parent.mkdir()
    path.write_text(PRECIOUS)
    path.chmod(0o600)
    return path


def intact(victim: Path) -> bool:
    return victim.read_text() == PRECIOUS and stat.S_IMODE(victim.stat().st_mode) == 0o600


def take_place(which: str, settings: Settings) -> None:
    """What an acquire under the limits does first with the file ``which``."""
    if which == "rate":
        list(acquire_turn(RATED, settings))
    else:
        with host_slot(CAPPED, settings) as slot:
            slot.keep("sandbox-a")
        release_host_slot(settings.base_url, "sandbox-a")


def digest_of(settings: Settings) -> str:
    """The limits folder's name for ``settings`` (the same wherever the state folder is)."""
    return limits_folder(settings).name


# ----------------------------------------------------------------------- another user
class OtherUser:
    """A real second user, ``nobody``, running shell lines through ``setpriv``."""

    def __init__(self) -> None:
        if os.geteuid() != 0:
            pytest.skip("acting as a second user needs root (setpriv --reuid)")
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv (util-linux) is not installed")
        try:
            entry = pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("this machine has no user named nobody")
        self.uid, self.gid = entry.pw_uid, entry.pw_gid

    def run(self, line: str) -> None:
        switch = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]
        subprocess.run(
            [*switch, "sh", "-ec", line],
            check=True,
            env={"PATH": os.defpath, "LC_ALL": "C"},
        )


@pytest.fixture
def other_user() -> OtherUser:
    return OtherUser()


@pytest.fixture
def shared(other_user: OtherUser) -> Iterator[Path]:
    """A folder like /tmp: everyone may write in it (sticky), reachable by the other user."""
    folder = Path(tempfile.mkdtemp(prefix="klavis-shared-"))
    try:
        folder.chmod(0o1777)
        try:
            other_user.run(f"test -w '{folder}' -a -x '{folder}'")
        except subprocess.CalledProcessError:
            pytest.skip(f"{folder.parent} is not reachable by a second user on this machine")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("which", ["rate", "slot.000.lock"])
def test_another_users_link_in_a_shared_state_folder_is_never_followed(
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    other_user: OtherUser,
    shared: Path,
    victim: Path,
    which: str,
) -> None:
    """The report: the state folder in a shared /tmp folder, where the other user made the
    limits' folders first, with the file a link to a 0600 file of root's. Refused, naming
    the folder; the file untouched."""
    digest = digest_of(settings)
    state = shared / "state"
    other_user.run(
        f"mkdir -m 0777 -p '{state}/host-limits/{digest}'\n"
        f"chmod 0777 '{state}' '{state}/host-limits'\n"
        f"ln -s '{victim}' '{state}/host-limits/{digest}/{which}'"
    )
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(state))
    with pytest.raises(ConfigurationError, match=rf"in {re.escape(str(state))}: it is owned by"):
        take_place(which, settings)
    assert intact(victim)
    for folder in (state, state / "host-limits"):  # nothing of the other user's is changed
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777


@pytest.mark.parametrize("which", ["rate", "slot.000.lock"])
def test_a_limits_folder_left_by_another_user_is_refused(
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    other_user: OtherUser,
    shared: Path,
    victim: Path,
    which: str,
) -> None:
    """A state folder of this user's, closed now, where another user made ``host-limits/``
    while it was open: the folder names its owner, nothing in it is opened."""
    digest = digest_of(settings)
    state = shared / "state-of-mine"
    state.mkdir()
    state.chmod(0o777)
    other_user.run(
        f"mkdir -p '{state}/host-limits/{digest}'\n"
        f"ln -s '{victim}' '{state}/host-limits/{digest}/{which}'"
    )
    state.chmod(0o755)
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(state))
    where = state / "host-limits"
    with pytest.raises(ConfigurationError, match=rf"in {re.escape(str(where))}: it is owned by"):
        take_place(which, settings)
    assert intact(victim)


# ----------------------------------------------------------------------- this user's mistakes
@pytest.mark.parametrize("which", ["rate", "slot.000.lock"])
def test_a_state_folder_others_can_write_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Settings, which: str
) -> None:
    state = tmp_path / "open-state"
    state.mkdir()
    state.chmod(0o1777)
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(state))
    with pytest.raises(
        ConfigurationError,
        match=rf"in {re.escape(str(state))}: others can write in it \(mode 1777\)",
    ):
        take_place(which, settings)
    assert not (state / "host-limits").exists()


def test_a_state_folder_its_group_can_write_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Settings
) -> None:
    """A umask of 002 makes folders group-writable: the limits' own folders stay 0700."""
    state = tmp_path / "group-state"
    state.mkdir()
    state.chmod(0o775)
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(state))
    take_place("rate", settings)
    folder = limits_folder(settings)
    assert folder.parent.parent == state
    assert stat.S_IMODE(folder.stat().st_mode) == stat.S_IMODE(folder.parent.stat().st_mode)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize("which", ["rate", "slot.000.lock"])
@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_link_in_the_limits_folder_is_never_followed(
    settings: Settings, victim: Path, which: str, link: str
) -> None:
    folder = limits_folder(settings)
    if link == "symbolic":
        (folder / which).symlink_to(victim)
        expected = "it is a link"
    else:
        os.link(victim, folder / which)
        expected = "it has 2 links"
    with pytest.raises(
        ConfigurationError, match=rf"in {re.escape(str(folder / which))}: {expected}"
    ):
        take_place(which, settings)
    assert intact(victim)


def test_a_linked_limits_folder_is_never_followed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Settings
) -> None:
    state = tmp_path / "state-with-link"
    state.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state / "host-limits").symlink_to(elsewhere)
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(state))
    with pytest.raises(ConfigurationError, match=r"host-limits: it is not a folder"):
        take_place("rate", settings)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("which", ["rate", "slot.000.lock", "slot.001.lock"])
def test_a_fifo_in_a_files_place_is_an_error_never_a_hang(settings: Settings, which: str) -> None:
    """A slot file made a FIFO hung the acquire in open() (past its pool's close); a FIFO
    rate file raised io.UnsupportedOperation."""
    folder = limits_folder(settings)
    fifo = folder / which
    os.mkfifo(fifo, 0o600)
    outcome: list[BaseException | None] = []

    def acquire() -> None:
        try:
            if which == "slot.001.lock":  # the second slot, reached when the first is held
                with host_slot(CAPPED, settings) as first:
                    first.keep("sandbox-a")
            take_place("rate" if which == "rate" else "slot", settings)
            outcome.append(None)
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)
        finally:
            release_host_slot(settings.base_url, "sandbox-a")

    worker = threading.Thread(target=acquire, daemon=True)
    worker.start()
    worker.join(WAIT)
    if worker.is_alive():  # open() blocks on the FIFO: give it a reader so the thread ends
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        pytest.fail(f"the acquire hung on the FIFO {which} for {WAIT:g} s")
    assert len(outcome) == 1
    assert isinstance(outcome[0], ConfigurationError), outcome
    assert str(outcome[0]).startswith(
        f"cannot keep the host limits in {fifo}: it is not a regular file"
    )


# ----------------------------------------------------------------------- the rate's turns
def reserve(folder: LimitsFolder, spacing: float, now: float) -> Reservation:
    steps = _reserve_turn(folder, spacing, clock=lambda: now)
    with pytest.raises(StopIteration) as done:
        next(steps)  # nobody holds the file's lock: no try to wait for
    reservation: Reservation = done.value.value
    return reservation


def test_a_turn_further_ahead_than_the_rate_allows_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Turns reserved an hour ahead (the clock was set back since): the next acquire does
    not wait for them, and says so at WARNING; a queue of waiters is not such a turn."""
    later = 1_000_000.0
    with LimitsFolder(tmp_path / "state", "d") as folder:
        for _ in range(3):  # before the clock was set back by an hour
            reserve(folder, 1.0, later + 3600)
        with caplog.at_level(logging.WARNING, logger="workflows"):
            now = reserve(folder, 1.0, later)
        assert (now.mine.turn, now.dropped) == (later, 3)
        assert "ignored 3 acquire turns" in caplog.text
        assert "further ahead than the host's rate allows" in caplog.text
        queue = [reserve(folder, 1.0, later).mine.turn for _ in range(9)]
        assert queue == [later + n for n in range(1, 10)]  # ten waiters: ten seconds, kept
        assert reserve(folder, 1.0, later + 0.5).dropped == 0


def test_different_rates_keep_the_slower_spacing(tmp_path: Path) -> None:
    with LimitsFolder(tmp_path / "state", "d") as folder:
        slow = reserve(folder, 10.0, 1000.0)
        fast = reserve(folder, 0.5, 1000.0)
        assert (slow.mine.turn, fast.mine.turn) == (1000.0, 1010.0)


def sleep_of(flow: Iterator[object]) -> float:
    step = next(flow)
    assert isinstance(step, Sleep)
    return step.seconds


def test_an_interrupted_wait_gives_its_turn_back(settings: Settings) -> None:
    """Two acquires wait behind a first one, then are interrupted (the driver closes the
    flow, as on Ctrl-C or a cancel): their turns are given back, and the next acquire takes
    the first free one, not one behind the dead turns (the report: 16.6 s behind six)."""
    assert list(acquire_turn(RATED, settings)) == []  # the first: now, no wait
    rate = limits_folder(settings) / "rate"
    [first] = parse(rate.read_bytes())
    second, third = acquire_turn(RATED, settings), acquire_turn(RATED, settings)
    assert sleep_of(second) > 0
    assert sleep_of(third) > 100  # one turn of 100 s behind the second
    turns = [t.turn for t in parse(rate.read_bytes())]
    assert turns == [first.turn, first.turn + 100, first.turn + 200]
    third.close()
    second.close()
    assert [t.turn for t in parse(rate.read_bytes())] == [first.turn]
    fourth = acquire_turn(RATED, settings)
    sleep_of(fourth)
    assert [t.turn for t in parse(rate.read_bytes())] == [first.turn, first.turn + 100]
    fourth.close()


def test_a_wait_of_more_than_a_few_turns_says_why_at_warning(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    list(acquire_turn(RATED, settings))
    waiting = [acquire_turn(RATED, settings) for _ in range(4)]
    with caplog.at_level(logging.WARNING, logger="workflows"):
        for flow in waiting[:3]:
            sleep_of(flow)
        assert caplog.records == []  # up to three turns: the ordinary wait of a busy host
        seconds = sleep_of(waiting[3])
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert re.match(r"an acquire waits \d+\.\d s for its turn", message), message
    assert seconds > 300
    assert "the host's rate of 0.01 acquires per second: 3 acquires" in message
    assert "$KLAVIS_HOST_MAX_ACQUIRES_PER_SECOND" in message
    for flow in waiting:
        flow.close()


def test_a_turn_that_has_come_is_not_given_back(settings: Settings) -> None:
    """Only a wait gives its turn back: the acquire whose turn came went on to send."""
    fast = HostLimits(max_acquires_per_second=10.0)
    assert list(acquire_turn(fast, settings)) == []  # the first: now
    second = acquire_turn(fast, settings)
    for step in second:  # the second waits its 0.1 s, as the driver does
        assert isinstance(step, Sleep)
        time.sleep(step.seconds)
    assert len(parse((limits_folder(settings) / "rate").read_bytes())) == 2
