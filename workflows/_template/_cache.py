"""The per-user cache of seed templates: packed archives kept on disk, named by their digest.

Where: ``$KLAVIS_SANDBOX_CACHE_DIR/templates``, else the per-user cache folder's
(``platformdirs.user_cache_dir("klavis-sandbox")``: ``~/.cache/klavis-sandbox/templates`` on
Linux), or the ``cache_dir=`` a template is made with. The folder is made ``0o700`` and must
be a folder of this user (not a link, not another user's: :class:`ConfigurationError`); a
folder of this user readable by others is narrowed to ``0o700``. Each archive is
``<sha-256 hex>.tar.gz``, ``0o600``.

Written atomically: packed into a temporary file of the same folder (``.partial-<pid>-*``),
then renamed onto its name, so a reader finds a whole archive or none. It is not fsync'ed: a
crash of the machine can leave a short or empty file under the final name, and that is caught
like any damage, by the digest: every use (:func:`open_verified`) hashes the whole file and
compares it with its name before a byte is uploaded (~1 ms a MiB), so a damaged archive is
refused, never uploaded. A temporary file whose process no longer runs is removed by the next
store.

Bounded: after each store, the archives least recently used (their modification time, set at
each use) are removed until the folder holds at most :func:`cache_limit` bytes
(``$KLAVIS_SANDBOX_TEMPLATE_CACHE_BYTES``, default :data:`DEFAULT_CACHE_BYTES`), never the one
just stored. A process that has an archive open keeps reading it after it is removed (POSIX);
a template whose archive was removed before its next use raises
:class:`~workflows.SeedTemplateError` saying so.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, BinaryIO, Final, cast

from workflows._errors import ConfigurationError, LocalWriteError, SeedTemplateError
from workflows._state_files import process_running

__all__ = [
    "CACHE_BYTES_ENV",
    "CACHE_DIR_ENV",
    "DEFAULT_CACHE_BYTES",
    "archive_path",
    "cache_folder",
    "cache_limit",
    "check_digest",
    "open_verified",
    "store",
    "store_bytes",
]

log = logging.getLogger("workflows")

CACHE_DIR_ENV: Final = "KLAVIS_SANDBOX_CACHE_DIR"
"""The per-user cache folder of the library (templates go in its ``templates/``)."""
CACHE_BYTES_ENV: Final = "KLAVIS_SANDBOX_TEMPLATE_CACHE_BYTES"
"""Most bytes of template archives the cache keeps (least recently used removed first)."""
DEFAULT_CACHE_BYTES: Final = 2 * 1024**3
"""2 GiB: hundreds of task trees of a few MiB each, packed."""

_PREFIX: Final = "sha256:"
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
_ARCHIVE: Final = re.compile(r"([0-9a-f]{64})\.tar\.gz")
_PARTIAL: Final = re.compile(r"\.partial-(\d+)-.*")
_CHUNK: Final = 1024 * 1024
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


def check_digest(digest: object) -> str:
    """``digest`` if it is a template digest (``sha256:`` and 64 lowercase hex digits), else
    :class:`~workflows.InvalidInputError`.

    >>> check_digest("sha256:" + "0" * 64)[:10]
    'sha256:000'
    """
    from workflows._errors import InvalidInputError

    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise InvalidInputError(
            f"{digest!r} is not a template digest: 'sha256:' and 64 lowercase hex digits, as "
            "SeedTemplate.digest and `klavis-sandbox template` give it"
        )
    return digest


def cache_limit() -> int:
    """``$KLAVIS_SANDBOX_TEMPLATE_CACHE_BYTES`` (a whole number of bytes, >= 0), else
    :data:`DEFAULT_CACHE_BYTES`; anything else is a :class:`ConfigurationError`."""
    text = os.environ.get(CACHE_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_CACHE_BYTES
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigurationError(
            f"{CACHE_BYTES_ENV}={text!r} is not a whole number of bytes >= 0 (e.g. 2147483648)"
        )
    return value


def cache_folder(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The templates folder (made if missing, ``0o700``): ``cache_dir``, else
    ``$KLAVIS_SANDBOX_CACHE_DIR/templates``, else the per-user cache folder's ``templates``."""
    if cache_dir is not None:
        folder = Path(cache_dir)
    else:
        base = os.environ.get(CACHE_DIR_ENV)
        if not base:
            import platformdirs

            base = platformdirs.user_cache_dir("klavis-sandbox", appauthor=False)
        folder = Path(base) / "templates"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # what is there is checked below
            folder.mkdir(mode=0o700)
        info = os.lstat(folder)
    except OSError as exc:
        raise LocalWriteError(
            f"cannot make the template cache {str(folder)!r}: {exc.strerror or exc}",
            path=str(folder),
            cause=exc,
        ) from exc
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigurationError(
            f"the template cache {str(folder)!r} is not a folder (a link or a file): remove it "
            f"or name another folder with {CACHE_DIR_ENV} or cache_dir="
        )
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        raise ConfigurationError(
            f"the template cache {str(folder)!r} belongs to another user: name a folder of "
            f"yours with {CACHE_DIR_ENV} or cache_dir="
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(folder, 0o700)  # others must not read (or plant) what is uploaded
    return folder


def archive_path(folder: Path, digest: str) -> Path:
    """Where the archive of ``digest`` is kept in ``folder``."""
    return folder / f"{digest.removeprefix(_PREFIX)}.tar.gz"


class _HashingFile:
    """What the packer writes to: a file, hashed and counted on the way."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self._out.write(data)
        self.sha256.update(data)
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        self._out.flush()


def _write_error(folder: Path, exc: OSError) -> LocalWriteError:
    message = f"cannot write a template into {str(folder)!r}: {exc.strerror or exc}"
    return LocalWriteError(message, path=str(folder), cause=exc)


def store(folder: Path, write: Callable[[IO[bytes]], object]) -> tuple[str, int]:
    """Have ``write(out)`` write an archive into a temporary file of ``folder``, then keep it
    under its digest (atomically; an archive of that name already there is replaced by the
    same bytes). Returns ``(digest, size)``; evicts past the limit. On any error nothing is
    left behind."""
    limit = cache_limit()
    fd, temp = tempfile.mkstemp(prefix=f".partial-{os.getpid()}-", suffix=".tmp", dir=folder)
    try:
        with open(fd, "wb") as raw:
            out = _HashingFile(raw)
            write(cast("IO[bytes]", out))  # a write-only file is all the packer needs
            out.flush()
        digest = _PREFIX + out.sha256.hexdigest()
        final = archive_path(folder, digest)
        os.replace(temp, final)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(exc, OSError) and not isinstance(exc, LocalWriteError):
            raise _write_error(folder, exc) from exc
        raise
    _evict(folder, limit, keep=final.name)
    return digest, out.size


def store_bytes(folder: Path, digest: str, data: memoryview) -> None:
    """Keep ``data`` (already checked to be ``digest``'s) under its digest, unless the archive
    there already is that one (then it is only marked used)."""
    final = archive_path(folder, digest)
    try:
        open_verified(final, digest, len(data)).close()
    except SeedTemplateError:
        store(folder, lambda out: out.write(data))


def _evict(folder: Path, limit: int, *, keep: str) -> None:
    """Remove the least recently used archives past ``limit`` bytes (never ``keep``), and the
    temporary files of processes that no longer run. Never raises."""
    archives: list[tuple[float, int, str]] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                partial = _PARTIAL.fullmatch(entry.name)
                if partial is not None:
                    pid = int(partial.group(1))
                    if pid != os.getpid() and not process_running(pid):
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
                    continue
                if not _ARCHIVE.fullmatch(entry.name):
                    continue
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    archives.append((info.st_mtime, info.st_size, entry.name))
    except OSError:
        return
    total = sum(size for _, size, _ in archives)
    for _, size, name in sorted(archives):
        if total <= limit:
            break
        if name == keep:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / name)
            log.info("removed template %s from the cache (over %d bytes)", name, limit)
        total -= size


def open_verified(path: Path, digest: str, size: int | None = None) -> BinaryIO:
    """The archive at ``path`` opened for reading at 0, once its whole content was hashed and
    found to be ``digest`` (and ``size`` bytes, when given); marks it used. Else
    :class:`~workflows.SeedTemplateError` (gone, not a file, or damaged), never the file."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError as exc:
        raise SeedTemplateError(
            f"template {digest} is no longer in the cache ({str(path)!r}: "
            f"{exc.strerror or exc}): the cache keeps at most {CACHE_BYTES_ENV} bytes (least "
            "recently used removed first); make the template again",
            digest=digest,
        ) from None
    archive = open(fd, "rb")  # noqa: SIM115 - returned, or closed below
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        hasher = hashlib.sha256()
        seen = 0
        while regular and (chunk := archive.read(_CHUNK)):
            hasher.update(chunk)
            seen += len(chunk)
        whole = size is None or seen == size
        if not (regular and whole and _PREFIX + hasher.hexdigest() == digest):
            raise SeedTemplateError(
                f"the cached archive {str(path)!r} does not match template {digest} (damaged "
                "or changed on disk); it was not uploaded: make the template again",
                digest=digest,
            )
        archive.seek(0)
        with contextlib.suppress(OSError):
            os.utime(fd)
    except BaseException:
        archive.close()
        raise
    return archive
