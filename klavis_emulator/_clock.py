"""Clocks the emulator consults for timestamps, TTL expiry and signed-URL expiry.

Every time-dependent decision of the emulator goes through a :class:`Clock`, so tests
can move time forward instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "OffsetClock", "SystemClock", "isoformat"]


@runtime_checkable
class Clock(Protocol):
    """Something that tells the current time as seconds since the Unix epoch."""

    def time(self) -> float:
        """Return the current time in seconds since the epoch (UTC)."""
        ...


class SystemClock:
    """The wall clock (``time.time``)."""

    def time(self) -> float:
        """Return the wall-clock time."""
        return time.time()

    def __repr__(self) -> str:
        return "SystemClock()"


class OffsetClock:
    """The wall clock moved forward by an offset that can be advanced at run time.

    This is the emulator's default clock: time flows normally, and
    ``POST /_emulator/clock/advance`` (or :meth:`advance`) jumps it forward.
    """

    def __init__(self, base: Clock | None = None, *, offset: float = 0.0) -> None:
        if offset < 0:
            raise ValueError("the offset of an OffsetClock must not be negative")
        self._base: Clock = base if base is not None else SystemClock()
        self._offset = float(offset)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[float], None]] = []

    def on_advance(self, listener: Callable[[float], None]) -> None:
        """Call ``listener(new_offset)`` after every :meth:`advance` (e.g. to persist it)."""
        self._listeners.append(listener)

    @property
    def offset(self) -> float:
        """Seconds this clock runs ahead of its base clock."""
        with self._lock:
            return self._offset

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` (>= 0) and return the new time."""
        if seconds < 0:
            raise ValueError("a clock can only be advanced by a non-negative number of seconds")
        with self._lock:
            self._offset += seconds
            offset = self._offset
        for listener in list(self._listeners):
            listener(offset)
        return self.time()

    def time(self) -> float:
        """Return the base clock's time plus the offset."""
        with self._lock:
            offset = self._offset
        return self._base.time() + offset

    def __repr__(self) -> str:
        return f"OffsetClock(offset={self.offset!r})"


class ManualClock:
    """A clock that only moves when told to (for unit tests of the state)."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` (>= 0) and return the new time."""
        if seconds < 0:
            raise ValueError("a clock can only be advanced by a non-negative number of seconds")
        with self._lock:
            self._now += seconds
            return self._now

    def time(self) -> float:
        """Return the current manual time."""
        with self._lock:
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock(now={self.time()!r})"


def isoformat(timestamp: float) -> str:
    """Format an epoch timestamp as an ISO 8601 string with a UTC offset."""
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat()
