"""Latency and fault injection, as ASGI middleware, for testing clients' retries.

Only requests to the API (``/local-sandbox...``) and to the signed-URL targets
(``/_storage/...``) are affected, never the control routes under ``/_emulator``.

A fault answers 429 (with ``Retry-After``), 500, 502 or 503 with a JSON ``detail``.
In mode ``before`` the request is not handed to the application at all; in mode ``after``
the operation runs and takes effect, then its answer is replaced by a 500, 502 or 503 (as
when a connection drops on the way back); ``mixed`` picks one of the two at random for
each fault. The random generator is seedable, so tests are deterministic.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, cast, get_args

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["FAULT_MODES", "FaultInjectionMiddleware", "FaultMode", "FaultSettings"]

FaultMode = Literal["before", "after", "mixed"]
FAULT_MODES: Final[tuple[str, ...]] = get_args(FaultMode)

_BEFORE_STATUSES: Final[tuple[int, ...]] = (429, 500, 502, 503)
_AFTER_STATUSES: Final[tuple[int, ...]] = (500, 502, 503)
_REASONS: Final[dict[int, str]] = {
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def is_affected_path(path: str) -> bool:
    """Whether faults and latency apply to a request for ``path``."""
    return path == "/local-sandbox" or path.startswith(("/local-sandbox/", "/_storage/"))


@dataclass
class FaultSettings:
    """The fault-injection knobs; change them at run time through ``/_emulator/faults``."""

    rate: float = 0.0
    mode: FaultMode = "mixed"
    latency_ms: int = 0
    seed: int | None = None
    statuses: tuple[int, ...] = _BEFORE_STATUSES
    injected: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        self.configure(
            rate=self.rate,
            mode=self.mode,
            latency_ms=self.latency_ms,
            seed=self.seed,
            statuses=self.statuses,
        )

    def configure(
        self,
        *,
        rate: float | None = None,
        mode: str | None = None,
        latency_ms: int | None = None,
        seed: int | None = None,
        statuses: Sequence[int] | None = None,
    ) -> None:
        """Change the given knobs (``None`` keeps a knob); ``seed`` reseeds the generator."""
        if rate is not None:
            if not 0.0 <= rate <= 1.0:
                raise ValueError("the fault rate must be between 0.0 and 1.0")
            self.rate = float(rate)
        if mode is not None:
            if mode not in FAULT_MODES:
                raise ValueError(f"the fault mode must be one of {', '.join(FAULT_MODES)}")
            self.mode = cast(FaultMode, mode)
        if latency_ms is not None:
            if latency_ms < 0:
                raise ValueError("latency_ms must not be negative")
            self.latency_ms = int(latency_ms)
        if statuses is not None:
            chosen = tuple(dict.fromkeys(statuses))
            if not chosen or any(status not in _BEFORE_STATUSES for status in chosen):
                raise ValueError("statuses must be a non-empty subset of 429, 500, 502, 503")
            self.statuses = chosen
        if seed is not None:
            self.seed = seed
            self._rng.seed(seed)

    def as_dict(self) -> dict[str, object]:
        """The settings as JSON-ready data."""
        return {
            "rate": self.rate,
            "mode": self.mode,
            "latency_ms": self.latency_ms,
            "seed": self.seed,
            "statuses": list(self.statuses),
            "injected": self.injected,
        }

    def draw(self) -> tuple[Literal["before", "after"], int] | None:
        """Decide the fate of one request: ``None`` (no fault) or ``(when, status)``."""
        if self.rate <= 0.0 or self._rng.random() >= self.rate:
            return None
        when: Literal["before", "after"]
        if self.mode == "mixed":
            when = "before" if self._rng.random() < 0.5 else "after"
        else:
            when = self.mode
        candidates = self.statuses
        if when == "after":
            candidates = tuple(s for s in self.statuses if s in _AFTER_STATUSES) or (502,)
        self.injected += 1
        return when, self._rng.choice(candidates)


class FaultInjectionMiddleware:
    """ASGI middleware applying :class:`FaultSettings` to API and storage requests."""

    def __init__(self, app: ASGIApp, settings: FaultSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Delay, fail, or pass the request through."""
        if scope["type"] != "http" or not is_affected_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.settings.latency_ms > 0:
            await anyio.sleep(self.settings.latency_ms / 1000)
        fate = self.settings.draw()
        if fate is None:
            await self.app(scope, receive, send)
            return
        when, status = fate
        if when == "after":

            async def discard(message: Message) -> None:
                return None

            await self.app(scope, receive, discard)
        await _send_fault(send, status, when)


async def _send_fault(send: Send, status: int, when: str) -> None:
    if when == "after":
        explanation = "the operation was carried out, but its answer was lost"
    else:
        explanation = "the operation was not carried out"
    body = json.dumps(
        {"detail": f"Injected fault: {status} {_REASONS[status]} ({explanation})."}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-emulator-fault", when.encode()),
    ]
    if status in (429, 503):
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
