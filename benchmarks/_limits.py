"""The machine's own cost of the stages a seed or a dump cannot avoid, measured in the run.

A seed must read the files, compress them, move the bytes to the service and create the files
there; a dump the same the other way round. Each stage is timed here on its own, with the
simplest fast code (no checks, no protocol), so that ``seed ÷ limit`` and ``dump ÷ limit``
show how much the library and the emulator add on top of the machine:

* :func:`read_tar`: the files of a folder into an uncompressed tar in memory;
* :func:`compress`: ISA-L level 1 on one core (``isal.igzip.compress``), the level both the
  library's packs and the emulator's dumps use;
* :func:`loopback_s`: the compressed bytes through a TCP connection on 127.0.0.1 to a thread
  that reads them;
* :func:`create_files_s`: decompress the archive and write its files into a folder, the faster
  of one thread and a pool of :data:`CREATE_THREADS` (the pool wins on disks whose file
  creation waits on the device; on tmpfs one thread wins, since the GIL serialises the rest).
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import tarfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from isal import igzip

__all__ = [
    "CREATE_THREADS",
    "compress",
    "create_files_s",
    "loopback_s",
    "read_tar",
]

CREATE_THREADS = 8
# isal's Python modules are untyped
_decompress: Callable[[Any], bytes] = igzip.decompress
_MTIME = 946_684_800


def read_tar(root: Path) -> tuple[memoryview, float]:
    """The regular files under ``root`` (sorted) as an uncompressed tar, and the seconds taken."""
    started = time.perf_counter()
    found: list[tuple[str, str]] = []
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            found.append((path, os.path.relpath(path, root).replace(os.sep, "/")))
    found.sort(key=lambda item: item[1])
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, name in found:
            info = tarfile.TarInfo(name)
            info.size = os.stat(path).st_size
            info.mode = 0o644
            info.mtime = _MTIME
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
    data = raw.getbuffer()  # no copy
    return data, time.perf_counter() - started


def compress(data: bytes | memoryview) -> tuple[bytes, float]:
    """``data`` compressed with ISA-L level 1 on this thread, and the seconds taken."""
    started = time.perf_counter()
    packed: bytes = igzip.compress(data, compresslevel=1)
    return packed, time.perf_counter() - started


def loopback_s(data: bytes) -> float:
    """Seconds to send ``data`` over a TCP connection on 127.0.0.1 to a thread reading it."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        received = [0]

        def sink() -> None:
            conn, _ = server.accept()
            buffer = bytearray(1024 * 1024)
            with conn:
                while n := conn.recv_into(buffer):
                    received[0] += n

        reader = threading.Thread(target=sink)
        reader.start()
        started = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(data)
            client.shutdown(socket.SHUT_WR)
            reader.join()
        seconds = time.perf_counter() - started
    assert received[0] == len(data), (received[0], len(data))
    return seconds


def _layout(tar_bytes: bytes | memoryview) -> tuple[list[str], list[tuple[str, int, int]]]:
    """The folders and the files (name, offset of the data, size) of an uncompressed tar."""
    folders: set[str] = set()
    files: list[tuple[str, int, int]] = []
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
        for member in tar:
            if member.isreg():
                files.append((member.name, member.offset_data, member.size))
                parent = os.path.dirname(member.name)
                while parent and parent not in folders:
                    folders.add(parent)
                    parent = os.path.dirname(parent)
    return sorted(folders), files


def create_files_s(archive: bytes, tar_bytes: bytes | memoryview, folder: Path) -> dict[str, float]:
    """Seconds to decompress ``archive`` and to create its files (the tar ``tar_bytes``, which
    it holds) under the new folder ``folder``, one thread and :data:`CREATE_THREADS`; the
    folder is removed after each. Keys: ``decompress``, ``create_1``, ``create_pool``,
    ``create`` (the faster) and ``total`` (decompress + create)."""
    folders, files = _layout(tar_bytes)
    started = time.perf_counter()
    data = memoryview(_decompress(archive))
    decompress = time.perf_counter() - started
    assert len(data) >= len(tar_bytes)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL

    def one(item: tuple[str, int, int]) -> None:
        name, offset, size = item
        fd = os.open(os.path.join(folder, name), flags, 0o644)
        try:
            view = data[offset : offset + size]
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    times: dict[str, float] = {"decompress": decompress}
    for key, threads in (("create_1", 1), ("create_pool", CREATE_THREADS)):
        started = time.perf_counter()
        os.mkdir(folder)
        for sub in folders:
            os.mkdir(os.path.join(folder, sub))
        if threads == 1:
            for item in files:
                one(item)
        else:
            with ThreadPoolExecutor(threads) as pool:
                for _ in pool.map(one, files, chunksize=16):
                    pass
        times[key] = time.perf_counter() - started
        shutil.rmtree(folder)
    times["create"] = min(times["create_1"], times["create_pool"])
    times["total"] = decompress + times["create"]
    return times
