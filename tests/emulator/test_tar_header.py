"""The fast header parser gives what ``tarfile.TarInfo.frombuf`` gives, on real headers of every
format and on mutated ones, or leaves the header to ``frombuf``; dumps stay byte for byte what
tarfile writes. (Writing headers is tested in ``tests/workflows/test_tar_header.py``: the library
and the emulator share the archive core's one module, :mod:`klavis_archive._tar_header`.)"""

from __future__ import annotations

import gzip
import io
import random
import shutil
import struct
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from klavis_archive import BoundedTarInfo, _tar_header, parse_common
from klavis_emulator._workspace import make_archive
from tests.helpers import tree_of_every_header

ENCODINGS = (("utf-8", "surrogateescape"), ("ascii", "strict"))
_FIELDS = (
    "name",
    "mode",
    "uid",
    "gid",
    "size",
    "mtime",
    "chksum",
    "type",
    "linkname",
    "uname",
    "gname",
    "devmajor",
    "devminor",
    "offset",
    "offset_data",
    "sparse",
    "pax_headers",
)
# What a mutation writes into a header: digits, separators, signs and prefixes int() takes,
# whitespace only str.strip() takes, base-256 markers, non-ASCII and NUL.
_BYTES = b"0178 \0\t\n\x0b+-_o/\x1c\x1f\x80\xff\xc3\xa9xS5K"
_FIELD_SPANS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (329, 337), (337, 345))
_FIELD_TEXTS = (b" 17 ", b"0o17", b"1_7", b"-1", b"+5", b"\x1c7", b"", b"  ", b"\x80\x01", b"\xff")


def _fields(info: tarfile.TarInfo) -> tuple[Any, ...]:
    return tuple(getattr(info, name) for name in _FIELDS)


def _outcome(buf: bytes, encoding: str, errors: str) -> tuple[Any, ...]:
    """What tarfile's own frombuf makes of ``buf``: its fields, or its exception."""
    try:
        info = tarfile.TarInfo.frombuf(buf, encoding, errors)
    except Exception as exc:  # compared, not swallowed
        return ("raises", type(exc), str(exc))
    return ("ok", _fields(info))


def _members() -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """Members that exercise every branch of a header: types, long and non-ASCII names,
    numbers past the octal fields, float and negative times."""
    found: list[tuple[tarfile.TarInfo, bytes | None]] = []

    def add(
        name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = None, **attrs: Any
    ) -> None:
        info = tarfile.TarInfo(name)
        info.type = kind
        if data is not None:
            info.size = len(data)
        for key, value in attrs.items():
            setattr(info, key, value)
        found.append((info, data))

    add("a.txt", data=b"hello")
    add("src/pkg/mod.py", data=b"x" * 700, mode=0o755, mtime=1_700_000_000)
    add("folder", tarfile.DIRTYPE)
    add("folder/sub/", tarfile.DIRTYPE)
    add("link", tarfile.SYMTYPE, linkname="a.txt")
    add("hard", tarfile.LNKTYPE, linkname="a.txt")
    add("fifo", tarfile.FIFOTYPE)
    add("dev", tarfile.CHRTYPE, devmajor=1, devminor=3)
    add("blk", tarfile.BLKTYPE, devmajor=8, devminor=1)
    add("cont", tarfile.CONTTYPE, data=b"c")
    add("d" * 99 + "/" + "f" * 90, data=b"prefix")  # ustar splits it into prefix and name
    add("n" * 150, data=b"long")  # GNU long name, PAX path
    add("café/naïve.txt", data=b"utf-8")
    add("l" * 120, tarfile.SYMTYPE, linkname="t" * 130)
    add("owners", data=b"o", uid=1000, gid=1000, uname="user", gname="group")
    add("big-ids", data=b"b", uid=8**7 + 5, gid=8**8, uname="u" * 40)
    add("float-time", data=b"t", mtime=1_700_000_000.25)
    add("negative-time", data=b"t", mtime=-86_400)
    add("huge-time", data=b"t", mtime=8**12)
    add("old", data=b"v7")
    return found


def _archive_headers(fmt: int) -> list[bytes]:
    """Every 512-byte block of an archive of :func:`_members` written in ``fmt``: headers,
    extended records and data alike (the latter make good malformed headers)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for info, data in _members():
            try:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
            except ValueError:
                continue  # a value this format cannot hold (ustar: a long name)
    raw = buffer.getvalue()
    return [raw[i : i + 512] for i in range(0, len(raw), 512)]


def _corpus() -> list[bytes]:
    blocks = [
        block
        for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT)
        for block in _archive_headers(fmt)
    ]
    return [*blocks, b"", b"\0" * 512, b"\0" * 511, b"x" * 512, blocks[0][:300]]


def _with_checksum(block: bytearray, kind: str) -> bytes:
    """``block`` with its checksum field set as tarfile writes it (unsigned), as old Sun tars
    did (signed), or left as the mutation made it."""
    if kind != "keep":
        block[148:156] = b" " * 8
        code = "148b8x356b" if kind == "signed" else "148B8x356B"
        total = 256 + sum(struct.unpack_from(code, bytes(block)))
        block[148:156] = b"%06o\0 " % (total & 0o777777)
    return bytes(block)


def _mutants(blocks: list[bytes], seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    headers = [b for b in blocks if len(b) == 512 and b.count(0) != 512]
    found = []
    for _ in range(count):
        block = bytearray(rng.choice(headers))
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.5:
                block[rng.randrange(512)] = rng.choice(_BYTES)
            else:
                start, end = rng.choice(_FIELD_SPANS)
                text = rng.choice(_FIELD_TEXTS)[: end - start]
                block[start:end] = text + b"\0" * (end - start - len(text))
        found.append(_with_checksum(block, rng.choice(("unsigned", "unsigned", "signed", "keep"))))
    return found


@pytest.mark.parametrize(("encoding", "errors"), ENCODINGS)
def test_real_headers_parse_as_tarfile_parses_them(encoding: str, errors: str) -> None:
    taken = 0
    for block in _corpus():
        fast = parse_common(tarfile.TarInfo, block, encoding, errors)
        if fast is not None:
            taken += 1
            assert _outcome(block, encoding, errors) == ("ok", _fields(fast)), block[:100]
        wrapped = _outcome_of_bounded(block, encoding, errors)
        assert wrapped == _outcome(block, encoding, errors), block[:100]
    assert taken > 30  # the common headers take the fast way


def _outcome_of_bounded(buf: bytes, encoding: str, errors: str) -> tuple[Any, ...]:
    """What the extraction's own header class makes of ``buf``."""
    try:
        info = BoundedTarInfo.frombuf(buf, encoding, errors)
    except Exception as exc:  # compared, not swallowed
        return ("raises", type(exc), str(exc))
    assert type(info) is BoundedTarInfo
    return ("ok", _fields(info))


@pytest.mark.parametrize(("encoding", "errors"), ENCODINGS)
def test_mutated_headers_parse_as_tarfile_parses_them_or_are_left_to_it(
    encoding: str, errors: str
) -> None:
    taken = declined = 0
    for block in _mutants(_corpus(), seed=20261124, count=6000):
        expected = _outcome(block, encoding, errors)
        fast = parse_common(tarfile.TarInfo, block, encoding, errors)
        if fast is None:
            declined += 1
        else:
            taken += 1
            assert expected == ("ok", _fields(fast)), block
        assert _outcome_of_bounded(block, encoding, errors) == expected, block
    assert taken > 1000  # both ways were exercised
    assert declined > 1000


def test_gnu_tar_headers_parse_as_tarfile_parses_them(tmp_path: Path) -> None:
    tar = shutil.which("tar")
    if tar is None:
        pytest.skip("needs the tar command (GNU tar or bsdtar), which this machine lacks")
    tree = tmp_path / "tree"
    (tree / "dir" / ("d" * 120)).mkdir(parents=True)
    (tree / "dir" / ("d" * 120) / "file.txt").write_text("deep")
    (tree / "café.txt").write_text("utf-8")
    (tree / "link").symlink_to("café.txt")
    archive = tmp_path / "a.tar"
    for fmt in ("gnu", "ustar", "pax"):
        result = subprocess.run(
            [tar, "--format", fmt, "-cf", str(archive), "-C", str(tree), "."],
            capture_output=True,
            check=False,
        )
        if result.returncode != 0:  # ustar cannot hold the long folder name: fine
            continue
        raw = archive.read_bytes()
        for i in range(0, len(raw), 512):
            block = raw[i : i + 512]
            fast = parse_common(tarfile.TarInfo, block, "utf-8", "surrogateescape")
            expected = _outcome(block, "utf-8", "surrogateescape")
            if fast is not None:
                assert expected == ("ok", _fields(fast))
            assert _outcome_of_bounded(block, "utf-8", "surrogateescape") == expected


def test_dumps_hold_tarfiles_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tree_of_every_header(tmp_path)

    def dump(name: str) -> bytes:
        make_archive(tree, tmp_path / name)
        return gzip.decompress((tmp_path / name).read_bytes())

    fast = dump("fast.tar.gz")
    monkeypatch.setattr(_tar_header, "common_header", lambda info: None)
    assert dump("tarfile.tar.gz") == fast


def test_the_checksum_test_is_exact_where_its_residues_alias() -> None:
    """parse_common checks a header's byte sum by its Adler-32 half and its parity: a sum off
    by 65,521 (the Adler modulus) or by twice that is told apart from the true one, and so is
    every other wrong sum, a negative one, one over 512 * 255, and the true one at both ends."""
    rng = random.Random(20261127)
    blocks = [bytes(512), b"\xff" * 512, b" " * 512]
    blocks += [bytes(rng.choices(range(256), k=512)) for _ in range(300)]
    blocks += [bytes(rng.choices(b"\x00 07\xff\x80", k=512)) for _ in range(300)]
    for block in blocks:
        total = sum(block)
        wrong = [total + d for d in (1, -1, 65521, -65521, 131042, -131042, 2, 7)]
        wrong += [rng.randint(-200, 140_000) for _ in range(20)]
        assert _tar_header._sums_to(block, total)
        for other in wrong:
            assert _tar_header._sums_to(block, other) is (other == total), (total, other)
