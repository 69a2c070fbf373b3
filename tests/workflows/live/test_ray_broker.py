"""The cluster's broker on a real local Ray cluster and the session emulator: leases from any
Ray worker, released when their holder dies, a handle passed between tasks without the key,
and the key checks made before anything is acquired."""

from __future__ import annotations

import pickle
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import ray

import workflows.ray
import workflows.ray._wire
from tests.helpers import RayCluster, listed_sandboxes, wait_until
from workflows import AsyncLocalSandbox, ConfigurationError, InvalidInputError, LocalSandbox
from workflows.ray import SandboxBroker

# Ray ships this module's functions and classes by value: its workers need not import tests/.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]

pytestmark = pytest.mark.slow


@ray.remote(num_cpus=0)
class Holder:
    """An actor that leases a sandbox through the broker, says which (a file), and blocks."""

    def hold(self, broker: SandboxBroker, marker: str) -> None:
        with broker.sandbox(["filesystem"]) as sb:
            Path(marker).write_text(sb.id)
            threading.Event().wait()


def _seed_then_hand_over(broker: SandboxBroker, key: str) -> dict[str, Any]:
    """Lease a sandbox, seed it, pass it to another Ray task (pickled: no key), which dumps it."""
    with broker.sandbox(["filesystem"]) as sb:
        sb.seed({"from-a.txt": "seeded by task A"})
        payload = pickle.dumps(sb) + ray.cloudpickle.dumps(sb)  # type: ignore[no-untyped-call]
        read = ray.get(dump_it.remote(sb))
        return {"read": read, "key_in_pickle": key.encode() in payload, "id": sb.id}


def _dump_it(sb: LocalSandbox) -> str:
    assert isinstance(sb, LocalSandbox)
    assert not sb.owned
    return sb.dump().text("from-a.txt")


seed_then_hand_over: Any = ray.remote(num_cpus=0)(_seed_then_hand_over)
dump_it: Any = ray.remote(num_cpus=0)(_dump_it)


def test_a_killed_actor_s_lease_is_released_after_lease_timeout(
    ray_cluster: RayCluster, broker_name: str, tmp_path: Path
) -> None:
    broker = SandboxBroker.connect(broker_name, max_sandboxes=2, lease_timeout=3)
    marker = tmp_path / "held"
    holder = Holder.remote()  # type: ignore[attr-defined]
    holder.hold.remote(broker, str(marker))
    wait_until(marker.exists, "holding a sandbox")
    sandbox_id = marker.read_text()
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == [sandbox_id]
    assert [lease.sandbox_id for lease in broker.held()] == [sandbox_id]

    ray.kill(holder)
    wait_until(
        lambda: not listed_sandboxes(ray_cluster.base_url, ray_cluster.token),
        "released after the holder was killed",
    )
    assert broker.held() == []
    stats = broker.stats()  # Ray reports the death (~2 s) before the 3 s lease_timeout runs out
    assert (stats.dead_holders, stats.expired) in ((1, 0), (0, 1))


def test_a_sandbox_passed_between_two_tasks_works_and_carries_no_key(
    ray_cluster: RayCluster, broker_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[bytes] = []
    original = workflows.ray._wire.send

    def capture(actor: Any, method: str, *args: Any) -> Any:
        answer = original(actor, method, *args)
        sent.append(ray.cloudpickle.dumps((method, args, answer)))  # type: ignore[no-untyped-call]
        return answer

    monkeypatch.setattr(workflows.ray._wire, "send", capture)
    broker = SandboxBroker.connect(broker_name, max_sandboxes=2)
    got = ray.get(seed_then_hand_over.remote(broker, ray_cluster.token))
    assert got["read"] == "seeded by task A"
    assert got["key_in_pickle"] is False
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []  # released on exit

    # the driver's own lease: what it sends to the broker and gets back holds no key either
    monkeypatch.setenv("KLAVIS_API_KEY", ray_cluster.token)
    with broker.sandbox(["filesystem"], base_url=ray_cluster.base_url) as sb:
        assert sb.id in listed_sandboxes(ray_cluster.base_url, ray_cluster.token)
        assert ray_cluster.token.encode() not in pickle.dumps(sb)
    assert [m for m in sent if b"acquire" in m]
    assert all(ray_cluster.token.encode() not in message for message in sent)
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


@ray.remote(num_cpus=0)
class AsyncUser:
    """An async actor (as an rllm rollout actor is) leasing with the async twin."""

    async def use(self, broker: SandboxBroker) -> dict[str, Any]:
        async with broker.async_sandbox(["filesystem"]) as sb:
            assert isinstance(sb, AsyncLocalSandbox)
            await sb.seed({"a.txt": "async"})
            text = (await sb.dump()).text("a.txt")
            return {
                "id": sb.id,
                "text": text,
                "held": [lease.sandbox_id for lease in broker.held()],
            }


def test_the_async_twin_leases_and_releases_from_an_async_actor(
    ray_cluster: RayCluster, broker_name: str
) -> None:
    broker = SandboxBroker.connect(broker_name, max_sandboxes=1)
    user = AsyncUser.remote()  # type: ignore[attr-defined]
    got = ray.get(user.use.remote(broker), timeout=120)
    assert got["text"] == "async"
    assert got["held"] == [got["id"]]
    assert broker.held() == []
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []
    assert broker.stats().released == 1


def test_a_broker_with_another_key_or_none_is_refused_before_any_acquire(
    ray_cluster: RayCluster, broker_name: str
) -> None:
    broker = SandboxBroker.connect(broker_name)
    other = broker.sandbox(["filesystem"], api_key="another-key", base_url=ray_cluster.base_url)
    with pytest.raises(ConfigurationError, match="another Klavis API key") as info, other:
        pass
    assert "another-key" not in str(info.value)
    assert broker.stats().acquired == 0

    keyless = SandboxBroker.connect(
        f"{broker_name}-keyless",
        actor_options={"runtime_env": {"env_vars": {"KLAVIS_API_KEY": ""}}},
    )
    try:
        lease = keyless.sandbox(
            ["filesystem"], api_key=ray_cluster.token, base_url=ray_cluster.base_url
        )
        with pytest.raises(ConfigurationError, match="runtime_env") as info, lease:
            pass
        assert ray_cluster.token not in str(info.value)
        assert keyless.stats().acquired == 0
    finally:
        assert keyless.shutdown() == []


def test_the_broker_is_found_by_name_and_keeps_its_own_cap(
    ray_cluster: RayCluster, broker_name: str
) -> None:
    first = SandboxBroker.connect(broker_name, max_sandboxes=3, lease_timeout=7)
    again = SandboxBroker.connect(broker_name)  # no settings given: it keeps its own
    assert again.stats().max_sandboxes == 3
    assert again.lease_timeout == 7
    with pytest.raises(ConfigurationError, match="runs with max_sandboxes=3"):
        SandboxBroker.connect(broker_name, max_sandboxes=9)  # other settings: never silently
    assert pickle.loads(pickle.dumps(first)).stats().max_sandboxes == 3
    with pytest.raises(InvalidInputError, match="max_sandboxes"):
        SandboxBroker.connect(broker_name, max_sandboxes=0)
    with pytest.raises(InvalidInputError, match="no sandbox broker"):
        workflows.ray.reap(f"{broker_name}-absent")
