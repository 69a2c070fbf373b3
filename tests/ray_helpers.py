"""Local Ray clusters for the tests, started through Ray's public options only.

Why a start needs care here (measured with ray 2.60.0 on this 2-core machine shared with other
test runs, load averages 8 to 25): the raylet waits a hard-coded 15 s for each port file its
dashboard agent writes once started (``NodeManager::WaitForDashboardAgentPorts``: "Timed out
waiting for file .../metrics_agent_port_<node>", then the raylet aborts; ray-project/ray#65983,
open; ``RAY_agent_register_timeout_ms`` does not change it), and the driver waits a hard-coded
30 s for the raylet to register (``raylet_start_wait_time_s`` in ray/_private/node.py: "The
current node timed out during startup"). The agent is a Python process whose start is mostly
``import ray``: 1.3 to 3 s of CPU (half of it, where Jupyter is installed, is jsonschema
importing ``rfc3987_syntax``, which compiles ~35 Lark grammars), 7 to 12 s of wall time at a
load of 11. So the start is a race the agent loses on a loaded machine, whatever the options.
What helps, measured as starts that came up over starts tried, each a fresh process (a start,
then a task), at the load averages given:

* ``ray.init(num_cpus=2, include_dashboard=False)``, as the tests did: 3 of 10 (load 10 to 25);
  with ``RAY_agent_register_timeout_ms=120000``: 1 of 4 (load 8 to 10; the raylet still gave up
  after 15 s);
* the agent's ports chosen beforehand (``metrics_agent_port``, ``metrics_export_port``,
  ``runtime_env_agent_port``, ``dashboard_agent_listen_port``, free ports bound and closed just
  before): 0 of 10 (load 11 to 21). Ray 2.60.0 does not pass ``dashboard_agent_listen_port``
  to the raylet, which still waits for that file, from its own start; with dynamic ports its
  15 s begin anew after the agent's first port file, which comes before that one. So ports
  stay dynamic here;
* a node without a log monitor (``include_log_monitor=False``, ``ray start
  --include-log-monitor=false``: one Python process fewer starting beside the agent; the tests
  read no worker output through the driver), no dashboard, a 150 MiB object store, through
  :class:`ray.cluster_utils.Cluster`: 4 of 5 (load 8 to 14), and 7 of 8 against 4 of 8 for
  ``ray.init`` in the same minutes, the two alternating (load 5 to 14);
* one start at a time in the run (the fixtures take a file lock), and another attempt when Ray
  reports its start-up timeout: attempts are independent (a fresh session each), each failed
  one's processes are killed.

Rejected: replacing Ray's private ``services.get_node`` to wait longer (what the tests did
before: a dependency's private function, and it did not help once the raylet itself aborts),
``ray.init`` (it takes neither ``include_log_monitor`` nor a node's ports), and ``ray start``
in a subprocess (the same start, plus a CLI's output to parse and a ``ray stop`` that would end
every Ray cluster on the machine). :class:`ray.cluster_utils.Cluster` is Ray's documented
utility for tests that need a cluster of one or more nodes on one machine; each node's
processes are this process's children, and ``Cluster.shutdown`` ends those only.

Caveat of ``Cluster``: the head writes its address to ``<ray temp dir>/ray_current_cluster``
(removed by ``shutdown``), where a plain ``ray.init()`` without an address, anywhere on the
machine, finds it and connects to it rather than starting a cluster of its own. The tests
therefore always connect with ``ray.init(address=...)``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster

__all__ = [
    "NODE_OPTIONS",
    "RAY_TEST_TIMEOUT",
    "START_ATTEMPTS",
    "RayCluster",
    "end_ray_children",
    "start_cluster",
    "with_environment",
]

NODE_OPTIONS: dict[str, Any] = {
    "include_dashboard": False,  # the head's dashboard process runs minimal
    "include_log_monitor": False,  # one Python process fewer starting beside the agent
    "object_store_memory": 150 * 1024 * 1024,  # the tests pass small objects
}
"""What every node of a test cluster is started with (``Cluster.add_node`` keywords, the
parameters of ``ray start``)."""

START_ATTEMPTS = 6
"""Starts tried per node before giving up (each a fresh Ray session; a failed one takes ~50 s:
the raylet's 15 s, then the driver's 30 s). 4 were not enough once: a 3-node cluster's first
node failed 4 times in a row at load 13 to 14, the run's other test process running Ray tests
beside it."""

RAY_TEST_TIMEOUT = 1800
"""The pytest-timeout of a Ray test module's tests (``pytest.mark.timeout``): the first Ray test
of a test process pays for its cluster's start (pytest-timeout counts fixtures), which may
wait for the other processes' starts under the lock and take up to ``START_ATTEMPTS`` attempts
per node."""

_STARTUP_TIMEOUT = "timed out during startup"  # Ray's message when its raylet did not register


@dataclasses.dataclass
class RayCluster:
    """A local Ray cluster of the tests: the key and emulator its machines' environment names,
    their ledger's folder, the address another driver connects to, and the
    :class:`ray.cluster_utils.Cluster` that runs its nodes (to add or remove nodes)."""

    token: str
    base_url: str
    state_dir: Path
    address: str = ""
    cluster: Cluster | None = None

    @property
    def environment(self) -> dict[str, str]:
        """What its nodes' environment holds while they start (:func:`with_environment`)."""
        return {
            "KLAVIS_API_KEY": self.token,
            "KLAVIS_BASE_URL": self.base_url,
            "KLAVIS_SANDBOX_STATE_DIR": str(self.state_dir),
            # the workers' template cache (a pickled SeedTemplate is kept there), never the user's
            "KLAVIS_SANDBOX_CACHE_DIR": str(self.state_dir / "template-cache"),
        }


@contextmanager
def with_environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in this process's environment while the block runs, then put back: the
    nodes started in the block inherit it, the tests never see it."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _add_node(cluster: Cluster, options: Mapping[str, Any]) -> None:
    """``cluster.add_node(**options)``, tried again while Ray reports its start-up timeout;
    the processes of a failed attempt are killed (only those: the nodes already up stay)."""
    for attempt in range(1, START_ATTEMPTS + 1):
        before = _ray_children()
        try:
            cluster.add_node(**options)
            return
        except Exception as exc:
            end_ray_children(keep=before)
            if _STARTUP_TIMEOUT not in str(exc) or attempt == START_ATTEMPTS:
                raise


def start_cluster(
    cpus: tuple[int, ...] = (2,), resources: tuple[dict[str, float], ...] = ()
) -> Cluster:
    """A local cluster of ``len(cpus)`` nodes, the first the head, with ``cpus[i]`` CPUs each
    (and ``resources[i]``, custom resources, where given), started one node after the other
    (:data:`NODE_OPTIONS`, :data:`START_ATTEMPTS` each).

    The driver is not connected: ``ray.init(address=cluster.address)``. Nodes inherit this
    process's environment as it is while they start. A start that fails leaves no process.

    >>> cluster = start_cluster((1, 1))  # doctest: +SKIP
    >>> ray.init(address=cluster.address)  # doctest: +SKIP
    """
    from ray.cluster_utils import Cluster

    cluster = Cluster()
    try:
        for index, count in enumerate(cpus):
            extra = {"resources": resources[index]} if index < len(resources) else {}
            _add_node(cluster, {**NODE_OPTIONS, "num_cpus": count, **extra})
    except BaseException:
        cluster.shutdown()  # type: ignore[no-untyped-call]
        raise
    return cluster


def _ray_children() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children(recursive=True) if _is_ray(child)}


def _is_ray(process: Any) -> bool:
    import psutil

    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return command.startswith("ray::") or "/ray/" in command


def end_ray_children(keep: Collection[int] = ()) -> None:
    """Kill the Ray processes among this process's children, but those in ``keep``: what a
    failed start left behind (its agents outlive it otherwise); only Ray's, only ours."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        if child.pid not in keep and _is_ray(child):
            with suppress(psutil.Error):
                child.kill()
