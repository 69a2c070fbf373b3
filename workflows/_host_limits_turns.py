"""The acquire turns under the host's rate: which start times the processes of this host have
reserved, kept in the limits folder's ``rate`` file.

The first version kept one number, the next free time, and every acquire took it and moved it
on by ``1 / rate``. Two faults followed from that: a turn reserved by an acquire that was
interrupted while it waited was never given back (six Ctrl-C'd waiters at 1 per 3 s left
the next process 16.6 s of waiting behind nobody), and a next time far ahead, written before
the clock was set back, made every process wait for it in silence. So the file now holds each
reserved turn (its time, the spacing it was reserved under, how many turns were kept when it
was, and a random token naming it), as JSON, and the rules are:

* **Reserve**: the earliest time from now on that is ``spacing`` away from every turn kept
  (a turn given back leaves a gap the next acquire takes); ``spacing`` is the largest of
  this acquire's and of the kept turns', so processes given different rates never start
  closer than the slower one allows.
* **Kept**: a turn still constrains the next one (it is less than ``spacing`` in the past,
  or ahead), and it is no further ahead than the rate allows: a turn reserved with ``k``
  turns kept is at most ``2 * spacing * k`` after the time it was reserved at (each kept turn
  rules out at most ``2 * spacing`` of time around it), so one further ahead than
  ``2 * spacing * (ahead + 1)`` plus a second of clock slack was written under another clock,
  or by hand: it is dropped (and logged at WARNING).
* **Give back**: an acquire interrupted while it waits removes its own turn.

The functions here are pure (no I/O, no clock): :mod:`workflows._host_limits` reads and writes
the file under its lock. A file that does not parse (torn by a process killed while writing,
edited by hand, or written by the first version) starts afresh: spacing is lost once, never
the acquires.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

__all__ = [
    "CLOCK_SLACK",
    "MAX_FILE_BYTES",
    "Reservation",
    "Turn",
    "dump",
    "give_back",
    "parse",
    "reserve",
]

CLOCK_SLACK = 1.0
"""Seconds a turn may lie beyond what the rate allows before it is taken for one written under
another clock (a step back of the wall clock by NTP is usually far less)."""

MAX_FILE_BYTES = 1 << 20
"""A ``rate`` file larger than this is not read (it starts afresh); one turn takes ~100 bytes."""


@dataclass(frozen=True)
class Turn:
    """One reserved start time."""

    turn: float
    """The wall-clock time the acquire may start."""
    spacing: float
    """The seconds between turns it was reserved under."""
    ahead: int
    """How many turns were kept when it was reserved."""
    token: str
    """Its name, for giving it back."""


@dataclass(frozen=True)
class Reservation:
    """What :func:`reserve` decided."""

    turns: list[Turn]
    """The turns to write back, the new one included."""
    mine: Turn
    """The new turn."""
    waiting_ahead: int
    """How many kept turns are still ahead of now (acquires waiting for theirs)."""
    dropped: int
    """How many turns were dropped as further ahead than the rate allows."""


def parse(data: bytes) -> list[Turn]:
    """The turns in a ``rate`` file's bytes; none when it does not parse."""
    try:
        loaded = json.loads(data)
        turns = [
            Turn(
                float(item["turn"]), float(item["spacing"]), int(item["ahead"]), str(item["token"])
            )
            for item in loaded["turns"]
        ]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return []
    return [
        t for t in turns if math.isfinite(t.turn) and math.isfinite(t.spacing) and t.spacing > 0
    ]


def dump(turns: list[Turn]) -> bytes:
    """A ``rate`` file's bytes for ``turns``."""
    return json.dumps({"turns": [asdict(t) for t in turns]}, separators=(",", ":")).encode()


def _too_far(turn: Turn, now: float) -> bool:
    return turn.turn > now + CLOCK_SLACK + 2 * turn.spacing * (max(turn.ahead, 0) + 1)


def reserve(turns: list[Turn], now: float, spacing: float, token: str) -> Reservation:
    """Reserve the earliest turn from ``now`` on that keeps every start ``spacing`` apart
    (see the module's rules); the turns to write back."""
    sane = [t for t in turns if not _too_far(t, now)]
    dropped = len(turns) - len(sane)
    widest = max([spacing, *(t.spacing for t in sane)])
    kept = sorted((t for t in sane if t.turn + widest > now), key=lambda t: t.turn)
    candidate = now
    for other in kept:  # ascending: once past one, the earlier ones are behind by >= widest
        if other.turn - widest < candidate < other.turn + widest:
            candidate = other.turn + widest
    mine = Turn(candidate, widest, len(kept), token)
    waiting = sum(1 for t in kept if t.turn > now)
    return Reservation(sorted([*kept, mine], key=lambda t: t.turn), mine, waiting, dropped)


def give_back(turns: list[Turn], token: str) -> list[Turn]:
    """``turns`` without the one named ``token``."""
    return [t for t in turns if t.token != token]
