"""Memory under attack: the peak RSS growth of the emulator and of the client on hostile input.

Figures:

* ``hostile_emulator_peak_rss_mb``: the largest growth of an emulator process's resident memory
  while it answers one hostile request (a 1 GiB PAX header in a 1 MB upload, a 60 MB JSON body,
  the same body chunked without a length, a 1 GiB sparse member, a member of size -1 before
  1 GiB of zeros, names over NAME_MAX and PATH_MAX). The emulator runs in a child process;
  before each request its kernel high-water mark is reset (``/proc/PID/clear_refs``) and its
  growth is ``VmHWM`` minus the RSS just before.
* ``hostile_client_peak_rss_mb``: the same for a client process (``benchmarks/_hostile_child.py``)
  running ``dump()`` and ``dump_to()`` against hostile storage answers (see that module).
* ``hostile_inputs_refused``: how many of the hostile inputs were refused with the expected
  status or error, against how many were sent (goal: all).

Every hostile input is built in a stream (``tests/crafted.py``): a 1 GiB header costs about
1 MiB of compressed bytes and no more memory in this process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import (
    BenchContext,
    EmulatorProcess,
    Figure,
    acquire_many,
    api_client,
    new_token,
    run_child,
)
from klavis_emulator import EmulatorConfig, EmulatorServer
from tests.crafted import (
    file,
    hardlink,
    iter_tar_gz,
    long_name,
    negative_size,
    pax_header_member,
    sparse_file,
    tar_gz,
    zeros_file,
)
from tests.hostile_storage import GZIP_HEAD, HostileStorage

__all__ = ["run"]

_MIB = 1024 * 1024
_GIB = 1024 * _MIB
_GOAL_MIB = 64.0
CLIENT_CASES = (
    "not-gzip-junk",
    "oversize-download",
    "sparse-member",
    "hardlink-fan-out",
    "header-bomb",
)


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _json_body(size: int) -> bytes:
    """A syntactically valid JSON body of about ``size`` bytes (one long string field)."""
    return b'{"server_names": ["filesystem"], "padding": "' + b"x" * size + b'"}'


def _chunks(data: bytes, size: int = _MIB) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _upload_and_initialize(
    client: httpx.Client, members: Callable[[], list[Any]]
) -> httpx.Response:
    created = client.post("/local-sandbox", json={"server_names": ["filesystem"]})
    created.raise_for_status()
    sandbox_id = created.json()["local_sandbox_id"]
    try:
        url = client.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
        put = httpx.put(
            url,
            content=iter_tar_gz(members()),
            headers={"Content-Type": "application/gzip"},
            timeout=300,
        )
        if put.status_code != 200:
            return put
        return client.post(f"/local-sandbox/{sandbox_id}/initialize")
    finally:
        client.delete(f"/local-sandbox/{sandbox_id}")


def _emulator_cases(
    client: httpx.Client,
) -> list[tuple[str, Callable[[], httpx.Response], tuple[int, ...]]]:
    body = _json_body(60 * 1000 * 1000)
    headers = {"Content-Type": "application/json"}
    return [
        (
            "pax-header-1GiB",
            lambda: _upload_and_initialize(client, lambda: [pax_header_member(_GIB)]),
            (400, 413),
        ),
        (
            "json-body-60MB",
            lambda: client.post("/local-sandbox", content=body, headers=headers),
            (413,),
        ),
        (
            "json-body-60MB-chunked",
            lambda: client.post("/local-sandbox", content=_chunks(body), headers=headers),
            (413,),
        ),
        (
            "sparse-member-1GiB",
            lambda: _upload_and_initialize(client, lambda: [sparse_file("hole.bin", _GIB)]),
            (400,),
        ),
        (
            "negative-size-then-1GiB",
            lambda: _upload_and_initialize(client, lambda: [negative_size("n", follow=_GIB)]),
            (400,),
        ),
        (
            "name-over-NAME_MAX",
            lambda: _upload_and_initialize(client, lambda: [file(long_name(300), b"x")]),
            (400,),
        ),
        (
            "path-over-PATH_MAX",
            lambda: _upload_and_initialize(client, lambda: [file(long_name(200, depth=25), b"x")]),
            (400,),
        ),
    ]


def _measure_emulator(ctx: BenchContext) -> tuple[float, int, int, dict[str, Any]]:
    detail: dict[str, Any] = {}
    refused = sent = 0
    worst = 0.0
    token = new_token()
    with (
        EmulatorProcess(ctx.emulator_root) as emulator,
        api_client(emulator.base_url, token, timeout=300) as client,
    ):
        # warm up: one ordinary lifecycle, so imports and caches are not charged to an attack
        _upload_and_initialize(client, lambda: [file("warm.txt", b"warm")])
        for name, send, expected in _emulator_cases(client):
            before = _status_kib(emulator.pid, "VmRSS")
            _reset_peak(emulator.pid)
            started = time.perf_counter()
            response = send()
            seconds = time.perf_counter() - started
            growth = (_status_kib(emulator.pid, "VmHWM") - before) / 1024
            worst = max(worst, growth)
            sent += 1
            ok = response.status_code in expected
            refused += ok
            detail[name] = {
                "status": response.status_code,
                "expected": list(expected),
                "growth_mib": round(growth, 1),
                "seconds": round(seconds, 2),
            }
    return worst, refused, sent, detail


def _hardlink_fan_out() -> list[Any]:
    """One 1 MiB file of zeros and 1,000 hard links to it: 1 GiB of copies from ~1 KiB."""
    return [zeros_file("seed.bin", _MIB), *(hardlink(f"copy-{i}", "seed.bin") for i in range(1000))]


def _serve_client_case(storage: HostileStorage, case: str) -> None:
    if case == "not-gzip-junk":  # 512 MiB that is not gzip: refuse at the first bytes
        storage.stream(b"<html>", b"junk " * 13, 512 * _MIB)
    elif case == "oversize-download":  # gzip-looking, far over the 64 MiB cap, no length
        storage.stream(GZIP_HEAD, b"\x00" * 4096, 512 * _MIB)
    elif case == "sparse-member":  # a 1 GiB sparse member in a few bytes
        storage.body(tar_gz([sparse_file("hole.bin", _GIB)]))
    elif case == "hardlink-fan-out":
        storage.body(tar_gz(_hardlink_fan_out()))
    elif case == "header-bomb":  # a 1 GiB PAX header in about 1 MB
        storage.body(tar_gz([pax_header_member(_GIB)]))
    else:
        raise ValueError(f"unknown case {case!r}")


def _measure_client(ctx: BenchContext) -> tuple[float, int, int, dict[str, Any]]:
    detail: dict[str, Any] = {}
    refused = sent = 0
    worst = 0.0
    token = new_token()
    with (
        HostileStorage() as storage,
        EmulatorServer(
            EmulatorConfig(public_url=storage.url, data_dir=ctx.folder("hostile-emulator"))
        ) as emulator,
    ):
        for case in CLIENT_CASES:
            _serve_client_case(storage, case)
            (sandbox_id,) = acquire_many(emulator.base_url, token, 1)
            try:
                result = run_child(
                    "_hostile_child",
                    emulator.base_url,
                    token,
                    sandbox_id,
                    str(ctx.folder("hostile-client")),
                )
            finally:
                with api_client(emulator.base_url, token) as client:
                    client.delete(f"/local-sandbox/{sandbox_id}")
                storage.reset()
            worst = max(worst, float(result["growth_mib"]))
            sent += 1
            refused += bool(result["refused"])
            detail[case] = result
    return worst, refused, sent, detail


def run(ctx: BenchContext) -> list[Figure]:
    """Send the hostile corpus to an emulator and a client; report their peak RSS growth."""
    emulator_worst, emulator_refused, emulator_sent, emulator_detail = _measure_emulator(ctx)
    client_worst, client_refused, client_sent, client_detail = _measure_client(ctx)
    method = {"method": "VmHWM after clear_refs, minus VmRSS just before"}
    return [
        Figure(
            "hostile_emulator_peak_rss_mb",
            round(emulator_worst, 1),
            "MiB",
            "<=",
            _GOAL_MIB,
            {**method, "cases": emulator_detail},
        ),
        Figure(
            "hostile_client_peak_rss_mb",
            round(client_worst, 1),
            "MiB",
            "<=",
            _GOAL_MIB,
            {**method, "cases": client_detail},
        ),
        Figure(
            "hostile_inputs_refused",
            (emulator_refused + client_refused) / (emulator_sent + client_sent),
            "fraction",
            "==",
            1.0,
            {"refused": emulator_refused + client_refused, "sent": emulator_sent + client_sent},
        ),
    ]
