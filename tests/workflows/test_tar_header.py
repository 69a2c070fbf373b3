"""The fast header writer gives the bytes ``TarInfo.tobuf(PAX_FORMAT)`` gives, or leaves the
member to it; packed archives stay byte for byte what tarfile writes. (Reading is tested in
``tests/emulator/test_tar_header.py``: the library and the emulator share the archive core's one
module, :mod:`klavis_archive._tar_header`.)"""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path
from typing import Any

import pytest

from klavis_archive import _tar_header, common_header
from tests.helpers import tree_of_every_header
from workflows import _pack
from workflows._seed import plan_directory

_NAMES = (
    "a.txt",
    "src/pkg/mod.py",
    "n" * 100,
    "n" * 101,
    "d" * 99 + "/",
    "café.txt",
    "tab\there",
    "",
    "\udcff-surrogate",
)
_TYPES = (
    tarfile.REGTYPE,
    tarfile.DIRTYPE,
    tarfile.SYMTYPE,
    tarfile.LNKTYPE,
    tarfile.CHRTYPE,
    tarfile.FIFOTYPE,
    tarfile.AREGTYPE,
    tarfile.CONTTYPE,
)
_NUMBERS = (0, 1, 0o644, 8**7 - 1, 8**7, 8**11 - 1, 8**11, -1, 1.5, 2.0, True, None)
_TEXTS = ("", "root", "u" * 32, "u" * 33, "ünicode", None)
_ATTRS = ("mode", "uid", "gid", "size", "mtime", "chksum", "devmajor", "devminor")


def _expected(info: tarfile.TarInfo) -> tuple[str, Any]:
    """What tarfile's own tobuf writes for ``info`` (or raises)."""
    try:
        return ("ok", tarfile.TarInfo.tobuf(info, tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
    except Exception as exc:  # compared, not swallowed
        return ("raises", type(exc))


def _random_member(rng: random.Random) -> tarfile.TarInfo:
    info = tarfile.TarInfo(rng.choice(_NAMES))
    info.type = rng.choice(_TYPES)
    for attr in _ATTRS:
        if rng.random() < 0.15:
            setattr(info, attr, rng.choice(_NUMBERS))
    for attr in ("uname", "gname", "linkname"):
        if rng.random() < 0.15:
            setattr(info, attr, rng.choice((*_TEXTS, *_NAMES)))
    if rng.random() < 0.05:
        info.pax_headers = {"comment": "x"}
    return info


def test_common_members_get_tarfiles_bytes() -> None:
    for name in ("a.txt", "src/pkg/mod.py", "n" * 99):  # a folder gets a "/" more
        for kind in (tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.size = 12345 if kind == tarfile.REGTYPE else 0
            info.linkname = "target/of/link" if kind == tarfile.SYMTYPE else ""
            info.mode, info.mtime = 0o755, 1_700_000_000
            header = common_header(info)
            assert header is not None  # the common members take the fast way
            assert ("ok", header) == _expected(info)


def test_random_members_get_tarfiles_bytes_or_are_left_to_it() -> None:
    rng = random.Random(20261124)
    taken = declined = 0
    for _ in range(20_000):
        info = _random_member(rng)
        header = common_header(info)
        if header is None:
            declined += 1
            continue
        taken += 1
        assert ("ok", header) == _expected(info), info.get_info()
    assert taken > 2000  # both ways were exercised
    assert declined > 2000


@pytest.mark.parametrize("preserve_mtime", [False, True])
def test_packed_archives_are_tarfiles_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preserve_mtime: bool
) -> None:
    tree = tree_of_every_header(tmp_path)
    entries = plan_directory(tree, preserve_mtime=preserve_mtime)

    def pack() -> bytes:
        out = io.BytesIO()
        _pack.write_archive(entries, out, threads=0)
        return out.getvalue()

    fast = pack()
    monkeypatch.setattr(_tar_header, "common_header", lambda info: None)
    assert pack() == fast
