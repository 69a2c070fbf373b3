"""The machine's own cost of the stages a seed or a dump cannot avoid, measured in the run.

A seed must read the files, compress them, move the bytes to the service and create the files
there; a dump the same the other way round. Each stage is timed here on its own, with the
simplest fast code (no checks, no protocol), so that ``seed ÷ limit`` and ``dump ÷ limit``
show how much the library and the emulator add on top of the machine:

* :func:`read_tar`: the files of a folder into an uncompressed tar in memory;
* :func:`compress`: ISA-L level 1 on one compressing thread, by the rule both the library's
  packs and the emulator's dumps follow (:class:`~klavis_archive._gzip_writer.GzipWriter`: a
  block whose sample will not shrink is stored without being compressed; until 2026-11-28
  every block was compressed, here and in the packers);
* :func:`loopback_s`: the compressed bytes through a TCP connection on 127.0.0.1 to a thread
  that reads them;
* :func:`create_files_s`: decompress the archive, read its headers (one ``struct`` call each)
  and write its files into a folder, each with the archive's time, the faster of one thread
  and a pool of :data:`CREATE_THREADS` (the pool wins on disks whose file creation waits on
  the device; on tmpfs one thread wins, since the GIL serialises the rest).
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import struct
import tarfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, cast

from isal import igzip

from klavis_archive._gzip_writer import GzipWriter
from klavis_archive._packer import COMPRESS_BLOCK

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
_BLOCK = tarfile.BLOCKSIZE


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


class _Pieces:
    """A sink keeping what is written, joined once the clock has stopped."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    def write(self, data: bytes | memoryview) -> int:
        self.pieces.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        """Nothing waits here."""


def compress(data: bytes | memoryview) -> tuple[bytes, float]:
    """``data`` compressed at ISA-L level 1 by the packers' rule (:class:`GzipWriter`: a block
    that will not shrink is stored untried) on a thread of its own, as the packers do; and
    the seconds taken."""
    owned = data if isinstance(data, bytes) else bytes(data)  # cut into views, not copies
    sink = _Pieces()
    started = time.perf_counter()
    writer = GzipWriter(cast("IO[bytes]", sink), compresslevel=1, block_size=COMPRESS_BLOCK)
    writer.write(owned)
    writer.close()
    seconds = time.perf_counter() - started
    return b"".join(sink.pieces), seconds


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


_HEADER = struct.Struct("100s24x12s12s8xc")  # name, size, mtime, type of a ustar header


def _layout(
    tar_bytes: bytes | memoryview,
) -> tuple[list[str], list[tuple[str, int, int, int]]]:
    """The folders and the files (name, offset of the data, size, time) of an uncompressed
    tar as :func:`read_tar` writes it (ustar headers, short ASCII names), read with one
    ``struct`` call a header: the least an extraction must do to learn what to create."""
    folders: set[str] = set()
    files: list[tuple[str, int, int, int]] = []
    view = memoryview(tar_bytes)
    offset = 0
    while offset + _BLOCK <= len(view):
        raw_name, raw_size, raw_mtime, kind = _HEADER.unpack_from(view, offset)
        if not raw_name[:1].strip(b"\0"):
            break  # the end blocks
        size = int(raw_size.rstrip(b"\0 ") or b"0", 8)
        offset += _BLOCK
        if kind in (b"0", b"\0"):
            name = raw_name.rstrip(b"\0").decode()
            files.append((name, offset, size, int(raw_mtime.rstrip(b"\0 ") or b"0", 8)))
            parent = os.path.dirname(name)
            while parent and parent not in folders:
                folders.add(parent)
                parent = os.path.dirname(parent)
        offset += -(-size // _BLOCK) * _BLOCK
    return sorted(folders), files


def create_files_s(archive: bytes, tar_bytes: bytes | memoryview, folder: Path) -> dict[str, float]:
    """Seconds to decompress ``archive``, to read its headers and to create its files (the tar
    ``tar_bytes``, which it holds) under the new folder ``folder``, each with its time, on one
    thread and on :data:`CREATE_THREADS`; the folder is removed after each. Keys:
    ``decompress``, ``headers``, ``create_1``, ``create_pool``, ``create`` (the faster) and
    ``total`` (decompress + headers + create).

    Reading the headers and setting each file's time are work an initialize cannot skip: it
    learns what to create from the headers, and a seed's times are the archive's (2000-01-01,
    or the files' own with ``preserve_mtime``). Until 2026-11 this limit left both out (the
    headers were read before the clock started, and the files kept the time of their
    writing); on ``small_files`` they cost about 5 ms and 3 ms of its 0.09-0.10 s."""
    started = time.perf_counter()
    data = memoryview(_decompress(archive))
    decompress = time.perf_counter() - started
    assert len(data) >= len(tar_bytes)
    started = time.perf_counter()
    folders, files = _layout(data)
    headers = time.perf_counter() - started
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL

    def one(item: tuple[str, int, int, int]) -> None:
        name, offset, size, mtime = item
        fd = os.open(os.path.join(folder, name), flags, 0o644)
        try:
            view = data[offset : offset + size]
            while view:
                view = view[os.write(fd, view) :]
            os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)

    times: dict[str, float] = {"decompress": decompress, "headers": headers}
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
    times["total"] = decompress + headers + times["create"]
    return times
