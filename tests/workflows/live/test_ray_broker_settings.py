"""The broker's one cluster configuration and its warm sandboxes (issue 31 points 5 and 8), on a
real local Ray cluster and the session emulator: a ``connect`` or a pool that asks other settings
than the live broker's is refused, naming both and ``reconfigure``; ``reconfigure`` applies to
every client; warm sandboxes are handed over without an acquire, seeded from their template,
reset and kept when their lease ends, and released when their kind goes unused."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import ray

from tests.helpers import RayCluster, listed_sandboxes, wait_until
from tests.workflows.live.broker_actors import Episodes
from workflows import ConfigurationError, InvalidInputError, LocalSandbox
from workflows.ray import RaySandboxPool, SandboxBroker, Warm

pytestmark = pytest.mark.slow


def test_a_conflicting_connect_is_refused_and_reconfigure_applies_to_everyone(
    ray_cluster: RayCluster, ray_conn: dict[str, Any], broker_name: str
) -> None:
    first = SandboxBroker.connect(broker_name, max_sandboxes=3, lease_timeout=7)
    with pytest.raises(ConfigurationError) as info:
        SandboxBroker.connect(broker_name, max_sandboxes=9, lease_timeout=7)
    message = str(info.value)
    assert "runs with max_sandboxes=3" in message
    assert "asked for max_sandboxes=9" in message
    assert f"SandboxBroker.connect({broker_name!r}).reconfigure(max_sandboxes=9)" in message
    again = pickle.loads(pickle.dumps(SandboxBroker.connect(broker_name)))

    with pytest.raises(ConfigurationError, match=r"max_acquires_per_second=None.*=4"):
        RaySandboxPool(
            ["filesystem"], size=6, max_acquires_per_second=4, broker_name=broker_name, **ray_conn
        )

    live = again.reconfigure(max_sandboxes=9, max_acquires_per_second=4)
    assert (live["max_sandboxes"], live["max_acquires_per_second"]) == (9, 4.0)
    stats = first.stats()  # another handle, the same broker: everyone's settings changed
    assert (stats.max_sandboxes, stats.max_acquires_per_second) == (9, 4.0)
    assert SandboxBroker.connect(broker_name, max_sandboxes=9).stats().max_sandboxes == 9

    with pytest.raises(InvalidInputError, match="max_sandboxes"):
        SandboxBroker.connect(broker_name, max_sandboxes=0)
    with pytest.raises(InvalidInputError, match="no setting"):
        first.reconfigure(cap=3)  # type: ignore[call-arg]


def test_a_pool_bigger_than_the_live_cap_is_warned_about(
    ray_cluster: RayCluster, ray_conn: dict[str, Any], broker_name: str
) -> None:
    SandboxBroker.connect(broker_name, max_sandboxes=1)
    with pytest.warns(UserWarning, match=r"size=6.*capped at 1"):
        pool = RaySandboxPool(["filesystem"], size=6, broker_name=broker_name, **ray_conn)
    pool.close()


def _idle_warm(broker: SandboxBroker, count: int) -> None:
    wait_until(lambda: broker.stats().warm_idle == count, f"{count} warm sandboxes idle")


def test_a_warm_sandbox_is_handed_over_seeded_then_reset_and_kept(
    ray_cluster: RayCluster, ray_conn: dict[str, Any], broker_name: str
) -> None:
    warm = Warm(["filesystem"], 2, template={"template.txt": "from the template"})
    broker = SandboxBroker.connect(broker_name, max_sandboxes=3, warm=warm)
    _idle_warm(broker, 2)
    ready = set(listed_sandboxes(ray_cluster.base_url, ray_cluster.token))
    assert len(ready) == 2
    with broker.sandbox(["filesystem"], **ray_conn) as sb:
        assert sb.id in ready  # no acquire: an idle warm one
        assert sb.dump().text("template.txt") == "from the template"
        sb.seed({"episode.txt": "written by the episode"})
    stats = broker.stats()
    assert (stats.warm_hits, stats.warm_misses, stats.acquired) == (1, 0, 2)
    wait_until(lambda: broker.stats().warm_resets == 1, "its sandbox reset and kept")
    _idle_warm(broker, 2)
    assert set(listed_sandboxes(ray_cluster.base_url, ray_cluster.token)) == ready
    with broker.sandbox(["filesystem"], **ray_conn) as sb:
        files = sb.dump()
        assert files.text("template.txt") == "from the template"
        assert "episode.txt" not in files  # reset: nothing of the last episode
    # a lease of another kind takes the free slot, not a warm one
    with broker.sandbox(["filesystem", "git"], **ray_conn) as other:
        assert other.id not in ready
    assert broker.stats().acquired == 3


def test_warm_sandboxes_of_a_kind_nobody_leases_are_released_after_idle_timeout(
    ray_cluster: RayCluster, ray_conn: dict[str, Any], broker_name: str
) -> None:
    broker = SandboxBroker.connect(
        broker_name, max_sandboxes=2, warm=Warm(["filesystem"], 2, idle_timeout=4)
    )
    wait_until(
        lambda: (
            not listed_sandboxes(ray_cluster.base_url, ray_cluster.token)
            and broker.stats().acquired == 2
        ),
        "warmed, then released unused",
    )
    assert broker.stats().warm_idle == 0
    with broker.sandbox(["filesystem"], **ray_conn):
        pass
    assert broker.stats().warm_misses == 1  # the kind was cold: acquired for the lease
    _idle_warm(broker, 2)  # leased again: kept warm again


def test_many_async_leases_take_warm_sandboxes_and_a_pool_warms_its_own(
    ray_cluster: RayCluster, ray_conn: dict[str, Any], broker_name: str
) -> None:
    broker = SandboxBroker.connect(
        broker_name, max_sandboxes=4, warm=Warm(["filesystem"], 4, base_url=ray_conn["base_url"])
    )
    _idle_warm(broker, 4)
    holder: Any = Episodes.remote()  # type: ignore[attr-defined]
    done = ray.get(holder.run.remote(broker, 12), timeout=300)
    assert done["errors"] == {}
    stats = broker.stats()
    assert stats.acquired == 4  # the 12 leases reused 4 sandboxes: reset between leases
    assert stats.warm_hits == 12
    broker.shutdown()

    def touch(sb: LocalSandbox, task: int) -> Any:
        return sb.id

    name = f"{broker_name}-pool"
    with RaySandboxPool(["filesystem"], size=2, warm=2, broker_name=name, **ray_conn) as pool:
        _idle_warm(pool.broker, 2)
        warmed = set(listed_sandboxes(ray_cluster.base_url, ray_cluster.token))
        results = pool.map(touch, range(4))
        assert {r.value for r in results} <= warmed
        assert pool.broker.stats().warm_hits >= 1
    pool.broker.shutdown()
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []
