"""A driver run in a subprocess by the broker's node-loss test: connects to a two-node cluster
(the test process keeps it, and removes its worker node when this driver says so), puts the
broker on the head node, a holder on each node, and reports what the broker did as JSON lines.

Usage: python broker_node_driver.py ADDRESS BROKER_NAME
(the cluster's processes have the key and the URL in their environment; this one needs none).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests.* from the repository

import ray

from tests.workflows.live.broker_actors import Episodes, Gate
from workflows.ray import SandboxBroker


def say(**what: Any) -> None:
    print(json.dumps(what), flush=True)


def until(check: Any, deadline: float) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise TimeoutError("waited too long")
        time.sleep(0.2)


def main() -> None:
    address, name = sys.argv[1:3]
    ray.init(address=address, log_to_driver=False)
    broker = SandboxBroker.connect(
        name, max_sandboxes=4, lease_timeout=600, actor_options={"resources": {"head": 0.01}}
    )
    gate = Gate.options(resources={"head": 0.01}).remote()  # type: ignore[attr-defined]
    doomed = Episodes.options(resources={"doomed": 0.01}).remote()  # type: ignore[attr-defined]
    live = Episodes.options(resources={"head": 0.01}).remote()  # type: ignore[attr-defined]

    def of(actor: Any) -> list[Any]:
        return [lease for lease in broker.held() if actor._actor_id.hex() in lease.session]

    doomed.run.remote(broker, 5, gate)
    until(lambda: len(of(doomed)) == 5 and broker.stats().held == 4, 300)
    running = live.run.remote(broker, 6, gate)
    until(lambda: len(of(live)) == 6, 300)
    say(ready=True, granted=broker.stats().granted)
    sys.stdin.readline()  # the test removes the doomed node, then says so
    started = time.monotonic()
    until(lambda: sum(lease.state == "held" for lease in of(live)) == 4, 200)
    stats = broker.stats()
    say(
        recovered_s=round(time.monotonic() - started, 1),
        doomed_leases=len(of(doomed)),
        dead_holders=stats.dead_holders,
        dropped=stats.dropped,
        expired=stats.expired,
        granted=stats.granted,
    )
    ray.get(gate.open.remote())
    done = ray.get(running, timeout=300)
    say(errors=done["errors"], results=len(done["results"]), released=broker.shutdown())


if __name__ == "__main__":
    main()
