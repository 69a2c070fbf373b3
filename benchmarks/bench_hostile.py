"""Memory under attack: the peak RSS growth of the emulator and of the client on hostile input.

Figures:

* ``hostile_emulator_peak_rss_mb``: the largest growth of an emulator process's resident memory
  while it answers one hostile request (a 1 GiB PAX header in a 1 MB upload, a 60 MB JSON body,
  the same body chunked without a length, a 1 GiB sparse member, a member of size -1 before
  1 GiB of zeros, names over NAME_MAX and PATH_MAX). The emulator runs in a child process;
  before each request its kernel high-water mark is reset (``/proc/PID/clear_refs``) and its
  growth is ``VmHWM`` minus the RSS just before.
  With Dovecot installed, also ``GET .../poste_email_toolathlon/{id}/dump`` of a sandbox
  whose mailbox holds the worst mail its limits allow, one shape a case (see
  :func:`_mail_cases`; stored beforehand with the sandbox's own IMAP account, as its agent
  could): the dump reads one bounded piece at a time. Without Dovecot these cases are
  skipped, and the detail says so.
* ``hostile_client_peak_rss_mb``: the same for a client process (``benchmarks/_hostile_child.py``)
  running ``dump()`` and ``dump_to()`` against hostile storage answers (see that module).
* ``hostile_inputs_refused``: how many of the hostile inputs were refused with the expected
  status or error, against how many were sent (goal: all).

Every hostile input is built in a stream (``tests/crafted.py``): a 1 GiB header costs about
1 MiB of compressed bytes and no more memory in this process.
"""

from __future__ import annotations

import base64
import imaplib
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
from klavis_emulator._mail.rules import MAX_MESSAGE_BYTES
from klavis_emulator._mcp.setup import find_tools
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


_MAIL = "poste_email_toolathlon"


def _text_message(subject: str, headers: bytes, body: bytes) -> bytes:
    return b"Subject: " + subject.encode() + b"\r\nTo: agent@mcp.com\r\n" + headers + b"\r\n" + body


def _lines(data: bytes, width: int = 998) -> bytes:
    return b"\r\n".join(data[i : i + width] for i in range(0, len(data), width)) + b"\r\n"


def _mail_cases() -> list[tuple[str, list[bytes]]]:
    """(name, messages) of the mailboxes dumped: each at most the largest message
    (:data:`~klavis_emulator._mail.rules.MAX_MESSAGE_BYTES`), as many as one account may hold."""
    room = MAX_MESSAGE_BYTES - 4096
    control = base64.encodebytes(b"\x01" * (room * 3 // 4 * 76 // 78)).replace(b"\n", b"\r\n")
    part = b"--b\r\nContent-Disposition: attachment; filename=" + b"f" * 900 + b"\r\n\r\nx\r\n"
    fields = b"".join(b"To: someone%d@example.com\r\n" % n for n in range(240_000))
    return [
        (  # a text body of control characters: sixfold in JSON
            "mail-dump-control-chars-4x10MB",
            [
                _text_message(
                    "control",
                    b"Content-Type: text/plain; charset=utf-8\r\n"
                    b"Content-Transfer-Encoding: base64\r\n",
                    control,
                )
            ]
            * 4,
        ),
        (  # bytes that are not UTF-8: a replacement character each, two bytes in memory
            "mail-dump-invalid-utf8-4x10MB",
            [
                _text_message(
                    "8bit",
                    b"Content-Type: text/plain; charset=utf-8\r\n",
                    _lines(bytes(range(128, 256)) * (room * 998 // 1000 // 128)),
                )
            ]
            * 4,
        ),
        (  # the most parts Dovecot reads (10,000), each an attachment with a long name
            "mail-dump-10k-attachments-4x10MB",
            [
                _text_message(
                    "parts",
                    b'Content-Type: multipart/mixed; boundary="b"\r\n',
                    part * 10_000 + b"--b--\r\n",
                )
            ]
            * 4,
        ),
        (  # 240,000 header lines and a 2 MB subject of encoded words
            "mail-dump-header-lines-4x10MB",
            [
                b"Subject: "
                + b"=?utf-8?b?w6nDqcOpw6k=?=\r\n " * 80_000
                + b"x\r\n"
                + fields
                + b"\r\nbody\r\n"
            ]
            * 4,
        ),
        ("mail-dump-10k-small-messages", [_text_message("small", b"", b"hi\r\n")] * 10_000),
        (  # issue 23's: 76 messages of 1 MiB (the quota takes 48 of them)
            "mail-dump-76x1MiB",
            [_text_message("1 MiB", b"", _lines(b"x" * (_MIB - 1100)))] * 76,
        ),
    ]


def _store(auth: dict[str, Any], messages: list[bytes]) -> int:
    """Append ``messages`` to the account's inbox over IMAP (as its agent could); how many
    the mail server took (the rest passed its quota)."""
    stored = 0
    with imaplib.IMAP4(auth["imap_server"], auth["imap_port"], timeout=120) as imap:
        imap.login(auth["email"], auth["password"])
        for message in messages:
            if imap.append("INBOX", None, None, message)[0] == "OK":
                stored += 1
    return stored


def _measure_mail_dumps(
    pid: int, client: httpx.Client
) -> Iterator[tuple[str, float, dict[str, Any]]]:
    """(case, growth, detail) of each mail dump case; none without Dovecot."""
    missing = find_tools().missing_outside(_MAIL)
    if missing is not None:
        return
    for name, messages in _mail_cases():
        acquired = client.post("/local-sandbox", json={"server_names": [_MAIL]})
        acquired.raise_for_status()
        sandbox_id = acquired.json()["local_sandbox_id"]
        url = f"/local-sandbox/{_MAIL}/{sandbox_id}/dump"
        try:
            client.get(url).raise_for_status()  # starts the mail server
            (item,) = client.get(f"/local-sandbox/{sandbox_id}").json()["servers"]
            stored = _store(item["auth_data"], messages)
            before = _status_kib(pid, "VmRSS")
            _reset_peak(pid)
            started = time.perf_counter()
            received = 0
            with client.stream("GET", url) as response:
                for chunk in response.iter_bytes():
                    received += len(chunk)
            seconds = time.perf_counter() - started
            growth = (_status_kib(pid, "VmHWM") - before) / 1024
            yield (
                name,
                growth,
                {
                    "status": response.status_code,
                    "expected": [200],
                    "growth_mib": round(growth, 1),
                    "seconds": round(seconds, 2),
                    "messages_stored": stored,
                    "mail_mib": round(sum(map(len, messages[:stored])) / _MIB, 1),
                    "answer_mib": round(received / _MIB, 1),
                },
            )
        finally:
            client.delete(f"/local-sandbox/{sandbox_id}")


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
        # not inputs refused: dumps of the worst mailboxes, answered (200) in flat memory
        mail_cases = 0
        for name, growth, case in _measure_mail_dumps(emulator.pid, client):
            worst = max(worst, growth)
            detail[name] = case
            mail_cases += 1
        if not mail_cases:
            detail["mail-dump"] = f"skipped: {find_tools().missing_outside(_MAIL)}"
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
