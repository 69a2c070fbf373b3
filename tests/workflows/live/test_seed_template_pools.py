"""A :class:`~workflows.SeedTemplate` handed to the pools' tasks and to Ray just works: a local
pool's tasks (both faces) seed from it without packing; a Ray task gets it through the object
store (``ray.put`` once) and unpickles it on its worker without packing (a worker whose packer
refuses to run, while the argument is unpickled and seeded); a ``RaySandboxPool`` task that
closes over a template seeds from it. The pools themselves are not changed: the template
pickles."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import RayCluster, listed_sandboxes
from tests.workflows.live.test_seed_template import make_task
from workflows import LocalSandbox, SeedTemplate, Snapshot
from workflows import _pack as pack_module


@pytest.fixture
def packs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = pack_module.write_archive

    def counting(entries: Any, *args: Any, **kwargs: Any) -> int:
        calls.append(len(entries))
        return real(entries, *args, **kwargs)

    monkeypatch.setattr(pack_module, "write_archive", counting)
    return calls


def test_a_local_pools_tasks_seed_from_one_template(
    make_pool: Any, conn: dict[str, str], tmp_path: Path, packs: list[int]
) -> None:
    template = SeedTemplate.from_folder(make_task(tmp_path / "task"))

    def task(sb: Any, index: int) -> int:
        count: int = sb.seed(template)
        assert sb.dump()["pkg0/mod0/f00.py"] == b"VALUE = 0\n"
        return count

    with make_pool(["filesystem"], size=2, **conn) as pool:
        results = pool.map(task, range(6))
    assert [r.value for r in results] == [template.files] * 6
    assert len(packs) == 1


def _seed_unpickled(refs: list[Any]) -> dict[str, Any]:
    """On a Ray worker: unpickle the template (``refs[0]``, fetched here rather than by Ray, so
    this worker's packer refuses to run first), seed a sandbox from it, dump it."""
    import ray

    import workflows._pack

    real = workflows._pack.write_archive

    def refuse(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("a Ray worker packed")

    workflows._pack.write_archive = refuse
    try:
        template = ray.get(refs[0])
        with LocalSandbox.acquire(["filesystem"], ttl_seconds=600) as sb:
            count = sb.seed(template)
            files = sorted(sb.dump())
    finally:
        workflows._pack.write_archive = real
    return {
        "pid": os.getpid(),
        "digest": template.digest,
        "count": count,
        "files": files,
        "path": str(template.path),
    }


def test_a_template_reaches_ray_workers_through_the_object_store(
    ray_cluster: RayCluster, tmp_path: Path, packs: list[int]
) -> None:
    import ray

    task = make_task(tmp_path / "task")
    template = SeedTemplate.from_folder(task)
    expected = sorted(Snapshot.from_directory(task))
    ref = ray.put(template)
    remote = ray.remote(num_cpus=0)(_seed_unpickled)
    results = ray.get([remote.remote([ref]) for _ in range(3)], timeout=300)
    assert len(packs) == 1
    for result in results:
        assert result["pid"] != os.getpid()
        assert result["digest"] == template.digest
        assert result["count"] == template.files
        assert result["files"] == expected
        assert result["path"] != str(template.path)  # the workers' own cache
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


def test_a_ray_pool_task_closing_over_a_template_seeds_from_it(
    ray_cluster: RayCluster, ray_conn: dict[str, str], broker_name: str, tmp_path: Path
) -> None:
    from workflows.ray import RaySandboxPool

    template = SeedTemplate.from_folder(make_task(tmp_path / "task"))

    def task(sb: LocalSandbox, index: int) -> int:
        return sb.seed(template)

    options: dict[str, Any] = {**ray_conn, "broker_name": broker_name, "progress": False}
    with RaySandboxPool(["filesystem"], size=2, **options) as pool:
        results = pool.map(task, range(4))
    assert [r.value for r in results] == [template.files] * 4, results.summary()
    assert listed_sandboxes(ray_cluster.base_url, ray_cluster.token) == []


def test_rays_serializer_carries_a_template_as_digest_and_one_buffer(tmp_path: Path) -> None:
    """What Ray's object store receives, without a cluster: Ray's cloudpickle at protocol 5
    puts the archive in one out-of-band buffer, and loading it back never packs."""
    from ray import cloudpickle

    dumps: Any = cloudpickle.dumps  # untyped
    template = SeedTemplate.from_folder(make_task(tmp_path / "task"))
    buffers: list[Any] = []
    data = dumps(template, protocol=5, buffer_callback=buffers.append)
    assert [bytes(b.raw()) for b in buffers] == [template.read_bytes()]
    assert len(data) < 300  # the digest and the count, not the archive
    again = cloudpickle.loads(data, buffers=buffers)
    assert (again.digest, again.files, again.size) == (
        template.digest,
        template.files,
        template.size,
    )
