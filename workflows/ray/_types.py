"""What the broker and its clients exchange, with no I/O: the broker's settings
(:class:`BrokerConfig`, :class:`Warm`), what :meth:`~workflows.ray.SandboxBroker.held` and
:meth:`~workflows.ray.SandboxBroker.stats` return (:class:`Lease`, :class:`BrokerStats`), a
granted lease (:class:`Leased`), and the checks of every setting, made on the client before
anything is sent and again by the broker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from .._errors import InvalidInputError
from .._handle import SandboxHandle
from .._models import ServerNames, check_acquire
from .._template import SeedTemplate

__all__ = [
    "DEFAULT_LEASE_TIMEOUT",
    "DEFAULT_MAX_SANDBOXES",
    "BrokerConfig",
    "BrokerStats",
    "Lease",
    "LeaseState",
    "Leased",
    "Settings",
    "Warm",
    "WarmKey",
    "check_config",
    "describe",
    "lease_key",
]

DEFAULT_MAX_SANDBOXES = 8
"""The cap of a broker created without ``max_sandboxes``."""
DEFAULT_LEASE_TIMEOUT = 30.0
"""Seconds a lease lives without its holder's heartbeat, when not given."""

LeaseState = Literal["waiting", "acquiring", "held"]
"""Where a lease is: waiting for a free slot, its acquire sent, or its sandbox held."""

WarmKey = tuple[frozenset[str], "str | None", "str | None", str]
"""What makes a lease and a warm sandbox fit: the server set, benchmark, test account, base URL."""


@dataclass(frozen=True)
class Warm:
    """Sandboxes of one server set that the broker keeps acquired ahead of the leases that
    will want them (``SandboxBroker.connect(warm=Warm(["filesystem"], 4))``).

    The broker keeps ``count`` of them idle, inside its cap and under its acquire rate,
    acquired with ``benchmark``, ``ttl_seconds`` and ``test_account_email``, seeded with
    ``template`` when given (a mapping of files, or a :class:`~workflows.SeedTemplate`: packed
    once, for every warm sandbox and every reset; as ``sb.seed`` takes). A lease of the same
    server set, benchmark, test account and base URL takes an idle one (a hand-over of a few
    milliseconds: no acquire); the TTL is the warm sandbox's. When such a lease ends, its
    sandbox is reset (and seeded again) and kept rather than released, while fewer than
    ``count`` are idle or a lease of that kind waits. An idle one is released after
    ``idle_timeout`` seconds unused; the idle ones give their slots to waiting leases of
    other kinds before those would wait for the cap. ``base_url``: the service's (None: the
    broker's own ``KLAVIS_BASE_URL``).
    """

    server_names: ServerNames
    count: int
    idle_timeout: float = 300.0
    template: Mapping[str, str | bytes] | SeedTemplate | None = None
    benchmark: str | None = None
    ttl_seconds: int | None = 7200
    test_account_email: str | None = None
    base_url: str | None = None
    servers: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        request = check_acquire(
            self.server_names,
            benchmark=self.benchmark,
            ttl_seconds=self.ttl_seconds,
            test_account_email=self.test_account_email,
        )
        names = (
            self.server_names if isinstance(self.server_names, str) else tuple(self.server_names)
        )
        object.__setattr__(self, "server_names", names)
        object.__setattr__(self, "servers", frozenset(request.wanted_servers()))
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise InvalidInputError(f"Warm's count must be an int >= 0, got {self.count!r}")
        _positive("Warm's idle_timeout", self.idle_timeout)
        if self.template is not None and not isinstance(self.template, (Mapping, SeedTemplate)):
            raise InvalidInputError(
                "Warm's template must be a mapping of files or a SeedTemplate (as sb.seed "
                f"takes), got {type(self.template).__name__}"
            )

    def key(self, default_base_url: str) -> WarmKey:
        """What a lease must ask for to take one of these."""
        base_url = (self.base_url or default_base_url).rstrip("/")
        return (self.servers, self.benchmark, self.test_account_email, base_url)

    def acquire_options(self) -> dict[str, Any]:
        """The keywords its sandboxes are acquired with (no key, no ledger)."""
        return {
            "benchmark": self.benchmark,
            "ttl_seconds": self.ttl_seconds,
            "test_account_email": self.test_account_email,
        }


def lease_key(server_names: ServerNames, options: Mapping[str, Any], base_url: str) -> WarmKey:
    """The :data:`WarmKey` of a lease's request."""
    request = check_acquire(server_names, benchmark=options.get("benchmark"))
    servers = frozenset(request.wanted_servers())
    benchmark, account = options.get("benchmark"), options.get("test_account_email")
    return (servers, benchmark, account, base_url.rstrip("/"))


class BrokerConfig(TypedDict, total=False):
    """The broker's settings, as :meth:`~workflows.ray.SandboxBroker.connect` and
    :meth:`~workflows.ray.SandboxBroker.reconfigure` take them (each one given or not: a
    ``connect`` checks only those it is given against the live broker's).

    ``max_sandboxes``: the cluster's cap (8 when the broker is made without it);
    ``max_acquires_per_second``: the cluster's acquire rate (None: no limit);
    ``lease_timeout``: seconds a lease lives without its holder's heartbeat (30);
    ``warm``: the :class:`Warm` sandboxes kept ready (none).
    """

    max_sandboxes: int
    max_acquires_per_second: float | None
    lease_timeout: float
    warm: Warm | Sequence[Warm] | None


@dataclass(frozen=True)
class Settings:
    """A broker's settings, every one resolved."""

    max_sandboxes: int = DEFAULT_MAX_SANDBOXES
    max_acquires_per_second: float | None = None
    lease_timeout: float = DEFAULT_LEASE_TIMEOUT
    warm: tuple[Warm, ...] = ()

    def updated(self, given: Mapping[str, Any]) -> Settings:
        """These settings with ``given`` (checked) applied."""
        return dataclasses.replace(self, **check_config(given))

    def as_dict(self) -> dict[str, Any]:
        """Every setting by name, read from the fields (a setting added is never left out;
        not ``dataclasses.asdict``, which would turn each :class:`Warm` into a dict)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidInputError(f"{name} must be a positive number, got {value!r}")


def check_config(given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` (a :class:`BrokerConfig`) checked and normalised; :class:`InvalidInputError`
    naming the first bad one."""
    unknown = set(given) - set(BrokerConfig.__annotations__)
    if unknown:
        known = sorted(BrokerConfig.__annotations__)
        raise InvalidInputError(f"the broker has no setting {sorted(unknown)}; it has {known}")
    out: dict[str, Any] = {}
    if "max_sandboxes" in given:
        cap = given["max_sandboxes"]
        if isinstance(cap, bool) or not isinstance(cap, int):
            raise InvalidInputError(f"max_sandboxes must be an int, got {cap!r}")
        if cap < 1:
            raise InvalidInputError(f"max_sandboxes must be at least 1, got {cap}")
        out["max_sandboxes"] = cap
    if "max_acquires_per_second" in given:
        rate = given["max_acquires_per_second"]
        if rate is not None:
            _positive("max_acquires_per_second", rate)
            rate = float(rate)
        out["max_acquires_per_second"] = rate
    if "lease_timeout" in given:
        _positive("lease_timeout", given["lease_timeout"])
        out["lease_timeout"] = float(given["lease_timeout"])
    if "warm" in given:
        warm = given["warm"]
        specs: tuple[Any, ...] = (
            () if warm is None else (warm,) if isinstance(warm, Warm) else tuple(warm)
        )
        for spec in specs:
            if not isinstance(spec, Warm):
                raise InvalidInputError(f"warm takes Warm(...) specs, got {spec!r}")
        out["warm"] = specs
    return out


def describe(settings: Mapping[str, Any]) -> str:
    """``max_sandboxes=8, lease_timeout=30.0, ...``: settings as a message names them."""
    return ", ".join(f"{name}={value!r}" for name, value in settings.items())


@dataclass(frozen=True)
class Lease:
    """One lease of the broker, as :meth:`~workflows.ray.SandboxBroker.held` lists it.

    ``holder`` names who asked (a Ray actor, worker or driver, and a token of the block or
    pool); ``session`` is the holder's process as the broker knows it; ``sandbox_id`` is None
    until the acquire returned; ``created`` and ``last_heartbeat`` are Unix times
    (``time.time()``) on the broker's machine; ``adopted``: taken over from a broker that died,
    its holder not yet back.
    """

    lease_id: str
    holder: str
    state: LeaseState
    server_names: tuple[str, ...]
    base_url: str
    sandbox_id: str | None
    created: float
    last_heartbeat: float
    session: str = ""
    adopted: bool = False


@dataclass(frozen=True)
class BrokerStats:
    """What a broker is set up with, and what it did since it (this incarnation) started.

    ``acquire_times``: the Unix times at which its latest acquires (up to 1000) were sent;
    ``expired``: leases ended because their holder stopped renewing them; ``dead_holders``:
    holders whose death Ray reported; ``dropped``: their waiting leases dropped (never
    granted); ``granted``: leases granted; ``grant_seconds``: for the latest (up to 10,000),
    seconds from the free slot (or warm sandbox) it took to the granted lease (acquire
    included); ``wait_seconds``: from its request to its grant (queue included);
    ``warm_hits``/``warm_misses``: leases of a warm kind served by an idle warm sandbox, or
    not; ``warm_idle``: warm sandboxes idle now; ``adopted``: sandboxes taken over from a dead
    broker; ``incarnation``: how many brokers of this name started (1 for the first).
    """

    max_sandboxes: int
    max_acquires_per_second: float | None
    lease_timeout: float
    acquired: int
    released: int
    expired: int
    acquire_times: tuple[float, ...]
    warm: tuple[Warm, ...] = ()
    waiting: int = 0
    held: int = 0
    busy: int = 0
    sessions: int = 0
    granted: int = 0
    dead_holders: int = 0
    dropped: int = 0
    warm_hits: int = 0
    warm_misses: int = 0
    warm_idle: int = 0
    warm_resets: int = 0
    adopted: int = 0
    incarnation: int = 1
    grant_seconds: tuple[float, ...] = ()
    wait_seconds: tuple[float, ...] = ()


@dataclass(frozen=True)
class Leased:
    """What a client gets for a granted lease: its id, the sandbox's handle, and whether it
    was an idle warm sandbox."""

    lease_id: str
    handle: SandboxHandle
    warm: bool = False
