"""HostLimits without a service: the checks of its numbers and of the environment, the folder
the processes share (private, named without the key), the slots and the rate reservations,
a wait given up or cancelled. The live tests (two real processes against the emulator) are in
``live/test_host_limits.py``."""

from __future__ import annotations

import asyncio
import logging
import math
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import workflows
from workflows import ConfigurationError, HostLimits, InvalidInputError, LocalSandbox, Settings
from workflows._config import ApiKey
from workflows._host_limits import (
    HostSlot,
    SlotWaitAbandoned,
    _reserve_turn,
    acquire_turn,
    async_host_slot,
    giving_up_when,
    held_slots,
    host_slot,
    limits_folder,
    release_host_slot,
    resolve_host_limits,
)
from workflows._host_limits_files import LimitsFolder
from workflows._host_limits_turns import Reservation, parse

SECRET = "sk-host-limits-secret-0123456789"
CLOSED_URL = "http://127.0.0.1:9"  # nothing listens: a request would be a connection error


@pytest.fixture
def settings() -> Settings:
    return Settings(api_key=ApiKey(SECRET), base_url="http://127.0.0.1:1")


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(workflows.HOST_MAX_SANDBOXES_ENV, raising=False)
    monkeypatch.delenv(workflows.HOST_MAX_ACQUIRES_PER_SECOND_ENV, raising=False)


@pytest.mark.parametrize("bad", [0, -1, True, False, 1.5, "2", math.nan])
def test_a_bad_cap_is_refused(bad: object) -> None:
    with pytest.raises(InvalidInputError, match=r"^max_sandboxes must be a whole number >= 1"):
        HostLimits(max_sandboxes=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -0.5, True, math.nan, math.inf, "1"])
def test_a_bad_rate_is_refused(bad: object) -> None:
    with pytest.raises(InvalidInputError, match=r"^max_acquires_per_second must be a finite"):
        HostLimits(max_acquires_per_second=bad)  # type: ignore[arg-type]


def test_good_limits_and_off() -> None:
    assert HostLimits(2, 0.5).active
    assert HostLimits(max_acquires_per_second=3).active
    assert not HostLimits().active


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (workflows.HOST_MAX_SANDBOXES_ENV, "0"),
        (workflows.HOST_MAX_SANDBOXES_ENV, "two"),
        (workflows.HOST_MAX_SANDBOXES_ENV, "2.5"),
        (workflows.HOST_MAX_ACQUIRES_PER_SECOND_ENV, "nan"),
        (workflows.HOST_MAX_ACQUIRES_PER_SECOND_ENV, "-1"),
        (workflows.HOST_MAX_ACQUIRES_PER_SECOND_ENV, "fast"),
    ],
)
def test_a_bad_environment_value_names_its_variable_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, no_env: None, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=rf"^{name} must be .*got {value!r}"):
        LocalSandbox.acquire(["git"], api_key="k", base_url=CLOSED_URL)
    with pytest.raises(ConfigurationError, match=rf"^{name} "):
        workflows.SandboxPool(["git"], api_key="k", base_url=CLOSED_URL)


def test_the_environment_sets_the_default_and_host_limits_overrides_it(
    monkeypatch: pytest.MonkeyPatch, no_env: None
) -> None:
    assert resolve_host_limits(None) is None  # off by default
    monkeypatch.setenv(workflows.HOST_MAX_SANDBOXES_ENV, " 8 ")
    monkeypatch.setenv(workflows.HOST_MAX_ACQUIRES_PER_SECOND_ENV, "2.5")
    assert resolve_host_limits(None) == HostLimits(8, 2.5)
    assert resolve_host_limits(HostLimits()) is None  # turned off explicitly
    assert resolve_host_limits(HostLimits(3)) == HostLimits(3)
    monkeypatch.setenv(workflows.HOST_MAX_SANDBOXES_ENV, "")
    assert resolve_host_limits(None) == HostLimits(None, 2.5)


def test_a_host_limits_of_another_type_is_refused_before_anything_is_sent(no_env: None) -> None:
    with pytest.raises(InvalidInputError, match=r"^host_limits must be a workflows.HostLimits"):
        LocalSandbox.acquire(["git"], api_key="k", base_url=CLOSED_URL, host_limits=8)  # type: ignore[arg-type]


def test_a_batch_over_the_cap_is_refused_before_anything_is_sent(no_env: None) -> None:
    limits = HostLimits(max_sandboxes=2)
    with pytest.raises(InvalidInputError, match=r"batch of 3 sandboxes .* cap of 2"):
        workflows.bulk_acquire(["git"], 3, api_key="k", base_url=CLOSED_URL, host_limits=limits)
    with pytest.raises(InvalidInputError, match=r"batch of 3 sandboxes .* cap of 2"):
        asyncio.run(
            workflows.async_bulk_acquire(
                ["git"], 3, api_key="k", base_url=CLOSED_URL, host_limits=limits
            )
        )


def test_the_shared_folder_is_private_and_never_names_the_key(settings: Settings) -> None:
    folder = limits_folder(settings)
    limits = HostLimits(2, 100.0)
    with host_slot(limits, settings) as slot:
        slot.keep("sandbox-a")
    assert list(acquire_turn(limits, settings)) == []  # the first turn is now: no sleep
    release_host_slot(settings.base_url, "sandbox-a")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
    seen = sorted(p.name for p in folder.iterdir())
    assert seen == ["rate", "slot.000.lock"]  # a slot file is made when a sweep reaches it
    for path in [folder, *folder.iterdir()]:
        assert SECRET not in str(path)
        assert settings.api_key.fingerprint not in str(path)  # a digest of it, not it
    for path in folder.iterdir():
        assert SECRET not in path.read_text()
    other = Settings(api_key=ApiKey(SECRET + "x"), base_url=settings.base_url)
    assert limits_folder(other) != folder  # each key its own limits
    assert limits_folder(Settings(api_key=ApiKey(SECRET), base_url="http://h:2")) != folder


def test_slots_count_and_come_back(settings: Settings) -> None:
    """Two slots taken, a third acquire waits until ``giving_up_when`` says stop; a release
    gives a slot to the next; a block that raises gives its slot back."""
    limits = HostLimits(max_sandboxes=2)
    with host_slot(limits, settings) as first:
        first.keep("a")
    with host_slot(limits, settings) as second:
        second.keep("b")
    assert held_slots() == 2
    tries = 0

    def stop_after_a_few_tries() -> bool:
        nonlocal tries
        tries += 1
        return tries >= 3

    with (
        pytest.raises(SlotWaitAbandoned),
        giving_up_when(stop_after_a_few_tries),
        host_slot(limits, settings),
    ):
        pytest.fail("a third slot under a cap of 2")
    assert tries == 3
    release_host_slot(settings.base_url, "a")
    with pytest.raises(ZeroDivisionError), host_slot(limits, settings) as third:
        _ = 1 / 0  # an acquire that failed: its slot goes back
    with host_slot(limits, settings) as third:
        third.keep("c")
    assert held_slots() == 2
    for sandbox_id in ("b", "c", "unknown"):
        release_host_slot(settings.base_url, sandbox_id)
    assert held_slots() == 0


def test_a_waiting_thread_gets_the_slot_released_by_another(settings: Settings) -> None:
    limits = HostLimits(max_sandboxes=1)
    with host_slot(limits, settings) as held:
        held.keep("a")
    waiting = threading.Event()
    got: list[HostSlot] = []

    def count_tries() -> bool:
        waiting.set()  # it swept the slots once and found none free
        return False

    def third() -> None:
        with giving_up_when(count_tries), host_slot(limits, settings) as slot:
            slot.keep("b")
            got.append(slot)

    worker = threading.Thread(target=third)
    worker.start()
    assert waiting.wait(30)
    assert got == []
    release_host_slot(settings.base_url, "a")
    worker.join(30)
    assert len(got) == 1
    release_host_slot(settings.base_url, "b")


def reserve(folder: LimitsFolder, spacing: float, now: float) -> Reservation:
    """One reservation in ``folder``'s rate file at the time ``now``; nobody else holds the
    file's lock, so there is no try to wait for."""
    steps = _reserve_turn(folder, spacing, clock=lambda: now)
    with pytest.raises(StopIteration) as done:
        next(steps)
    reservation: Reservation = done.value.value
    return reservation


def test_rate_reservations_are_spaced(tmp_path: Path) -> None:
    """Each reservation is the one before plus 1/rate, however fast they are made."""
    with LimitsFolder(tmp_path / "state", "d") as folder:
        turns = [reserve(folder, 0.5, 1000.0).mine.turn for _ in range(5)]
        assert turns == [1000.0, 1000.5, 1001.0, 1001.5, 1002.0]
        assert [t.turn for t in parse((folder.path / "rate").read_bytes())] == turns
        # a second later the first two turns are past by a spacing or more: no longer kept
        later = reserve(folder, 0.5, 1001.0)
        assert later.mine.turn == 1002.5
        assert later.waiting_ahead == 2  # 1001.5 and 1002.0; 1001.0 is now
        assert [t.turn for t in later.turns] == [1001.0, 1001.5, 1002.0, 1002.5]


@pytest.mark.parametrize(
    "content", ["garbage", "nan", "1e30", "", "1000000.0", '{"turns": 5}', '{"turns": [{}]}']
)
def test_a_bad_rate_file_starts_afresh(tmp_path: Path, content: str) -> None:
    """Torn, hand-edited, or the first version's single number: spacing starts afresh."""
    with LimitsFolder(tmp_path / "state", "d") as folder:
        (folder.path / "rate").write_text(content)
        assert reserve(folder, 0.25, 1000.0).mine.turn == 1000.0
        assert [t.turn for t in parse((folder.path / "rate").read_bytes())] == [1000.0]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_async_wait_runs_on_the_loop_and_a_cancel_gives_nothing_back_held(
    settings: Settings, loop: asyncio.AbstractEventLoop
) -> None:
    limits = HostLimits(max_sandboxes=1)

    async def scenario() -> None:
        async with async_host_slot(limits, settings) as held:
            held.keep("a")
        swept = asyncio.Event()

        def sweep_seen() -> bool:
            swept.set()  # called on the loop's thread: the wait runs on the loop
            return False

        async def wait_for_slot() -> None:
            with giving_up_when(sweep_seen):
                async with async_host_slot(limits, settings):
                    pytest.fail("a second slot under a cap of 1")

        waiter = asyncio.ensure_future(wait_for_slot())
        await swept.wait()  # the loop ran this coroutine while the other waited
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert held_slots() == 1
        release_host_slot(settings.base_url, "a")
        async with async_host_slot(limits, settings) as again:  # the cancelled wait took none
            again.keep("b")
        release_host_slot(settings.base_url, "b")

    loop.run_until_complete(scenario())
    assert held_slots() == 0


def test_limits_that_cannot_be_kept_say_where_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Settings, no_env: None
) -> None:
    """A state folder that is a file (as unwritable as it gets for root): ConfigurationError
    naming it, not limits silently exceeded."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("KLAVIS_SANDBOX_STATE_DIR", str(blocker))
    limits = HostLimits(max_sandboxes=1)
    with pytest.raises(ConfigurationError, match=r"^cannot keep the host limits in .*not-a-folder"):
        LocalSandbox.acquire(["git"], api_key="k", base_url=CLOSED_URL, host_limits=limits)
    with pytest.raises(ConfigurationError, match=r"^cannot keep the host limits"):
        list(acquire_turn(HostLimits(max_acquires_per_second=1), settings))


def test_a_wait_for_a_slot_says_why_once_at_info(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    limits = HostLimits(max_sandboxes=1)
    with host_slot(limits, settings) as held:
        held.keep("a")
    tries = 0

    def stop_after_a_few_tries() -> bool:
        nonlocal tries
        tries += 1
        return tries >= 4

    with (
        caplog.at_level(logging.INFO, logger="workflows"),
        pytest.raises(SlotWaitAbandoned),
        giving_up_when(stop_after_a_few_tries),
        host_slot(limits, settings),
    ):
        pytest.fail("a second slot under a cap of 1")
    release_host_slot(settings.base_url, "a")
    [record] = caplog.records  # once per wait, not once per try
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        "an acquire waits for a place under the host's cap of 1 sandboxes: every one is held "
        "by this host's processes (host_limits' max_sandboxes, or $KLAVIS_HOST_MAX_SANDBOXES)"
    )
