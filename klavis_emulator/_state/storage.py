"""Stored objects behind signed URLs: uploads in, dumps and artifacts out.

Objects live under ``<data_dir>/storage/<key>``; every key of a sandbox starts with
``sandboxes/<id>/``, and the sandbox's objects go with it when it is released. A URL is
signed (HMAC, with the per-emulator secret in ``<data_dir>/signing.key``) for one method,
one key and an expiry on the emulator's clock; an upload is received chunk by chunk into a
temporary file and published atomically, unless its sandbox was released meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Final, Literal

from .._signing import SignedUrl, UrlSigner, is_valid_object_key
from .._workspace import make_archive
from .errors import NO_SPACE_ERRNOS, ObjectNotFound, OutOfSpace, UploadTooLarge
from .sandboxes import Sandboxes, SandboxPart

__all__ = ["REGIONS", "Region", "Storage", "UploadWriter"]

REGIONS: Final[tuple[str, ...]] = ("us", "asia")

Region = Literal["us", "asia"]

_UPLOAD_ROUTE: Final = "/_storage/upload"
_DOWNLOAD_ROUTE: Final = "/_storage/download"
_SANDBOX_KEY_RE = re.compile(r"^sandboxes/([0-9a-f-]{36})/")
_KEPT_DUMPS = 8


class UploadWriter:
    """Receives an upload chunk by chunk into a temporary file, then publishes it atomically."""

    def __init__(
        self,
        final_path: Path,
        temp_path: Path,
        max_bytes: int,
        publish: Callable[[Path, Path], None],
    ) -> None:
        self._final = final_path
        self._temp = temp_path
        self._publish = publish
        self._max_bytes = max_bytes
        self._size = 0
        self._file: BinaryIO | None = temp_path.open("xb")

    @property
    def size(self) -> int:
        """Bytes received so far."""
        return self._size

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``; raise :class:`UploadTooLarge` past the cap (and discard)."""
        if self._file is None:
            raise RuntimeError("this upload is already finished")
        self._size += len(chunk)
        if self._size > self._max_bytes:
            self.abort()
            raise UploadTooLarge(
                f"The upload is larger than the emulator's limit of {self._max_bytes} bytes."
            )
        try:
            self._file.write(chunk)
        except OSError as exc:
            self.abort()
            if exc.errno in NO_SPACE_ERRNOS:
                raise OutOfSpace("receiving the upload", exc) from exc
            raise

    def commit(self) -> None:
        """Publish the received bytes as the object (replacing an earlier upload)."""
        if self._file is None:
            raise RuntimeError("this upload is already finished")
        try:
            self._file.close()  # flushes what is buffered
        except OSError as exc:
            self._file = None
            self.abort()
            if exc.errno in NO_SPACE_ERRNOS:
                raise OutOfSpace("receiving the upload", exc) from exc
            raise
        self._file = None
        try:
            self._publish(self._temp, self._final)
        finally:
            self.abort()

    def abort(self) -> None:
        """Discard the received bytes (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        with contextlib.suppress(FileNotFoundError):
            self._temp.unlink()


def _load_secret(path: Path) -> bytes:
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        secret = secrets.token_bytes(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(secret)
    if len(secret) < 16:
        raise RuntimeError(f"the signing key {path} is too short; delete it to make a new one")
    return secret


class Storage(SandboxPart):
    """The objects of one emulator and the signer of their URLs."""

    def __init__(
        self, sandboxes: Sandboxes, *, signed_url_minutes: int, max_upload_bytes: int
    ) -> None:
        super().__init__(sandboxes)
        folders = sandboxes.folders
        self._root = folders.storage
        self.signer = UrlSigner(_load_secret(folders.root / "signing.key"), self._clock)
        self.signed_url_minutes = signed_url_minutes
        self.max_upload_bytes = max_upload_bytes

    def remove(self, sandbox_id: str) -> None:
        """Delete the objects of a released sandbox."""
        shutil.rmtree(self._root / "sandboxes" / sandbox_id, ignore_errors=True)

    def object_path(self, key: str) -> Path:
        """The file behind an object key."""
        if not is_valid_object_key(key):
            raise ObjectNotFound("This storage URL does not name a valid object.")
        return self._root / key

    def upload_url(self, key: str, base_url: str) -> SignedUrl:
        """A signed ``PUT`` URL for the object ``key``."""
        return self._signed("PUT", _UPLOAD_ROUTE, key, base_url)

    def download_url(self, key: str, base_url: str) -> SignedUrl:
        """A signed ``GET`` URL for the object ``key``."""
        return self._signed("GET", _DOWNLOAD_ROUTE, key, base_url)

    def _signed(self, method: str, route: str, key: str, base_url: str) -> SignedUrl:
        minutes = self.signed_url_minutes
        return self.signer.sign(
            base_url=base_url, route=route, method=method, key=key, minutes=minutes
        )

    def archive_to(self, folder: Path, key: str, *, what: str) -> None:
        """Write ``folder`` as a tar.gz object under ``key``, keeping a few per folder
        (:class:`OutOfSpace` naming ``what`` when the disk is full)."""
        target = self._root / key
        temp = self._tmp / f"archive-{uuid.uuid4()}.tar.gz"
        try:
            make_archive(folder, temp)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temp, target)
        except OSError as exc:
            if exc.errno in NO_SPACE_ERRNOS:
                raise OutOfSpace(f"writing {what}", exc) from exc
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        self._prune_dumps(target.parent)

    @staticmethod
    def _prune_dumps(folder: Path) -> None:
        """Keep the newest archives of a folder only (older download URLs then answer 404)."""
        dumps = sorted(folder.glob("*.tar.gz"), key=lambda path: path.stat().st_mtime_ns)
        for old in dumps[:-_KEPT_DUMPS]:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()

    def _sandbox_is_live(self, key: str, *, expire: bool = True) -> bool:
        match = _SANDBOX_KEY_RE.match(key)
        if match is None:
            return False
        if expire:
            self._sandboxes.expire_due()
        return self._sandboxes.is_live(match[1])

    def begin_upload(
        self, key: str, *, expires: str | None, signature: str | None, content_length: int | None
    ) -> UploadWriter:
        """Check a signed ``PUT`` and return a writer for its body.

        Raises :class:`~klavis_emulator._signing.SignatureError` (bad or expired signature),
        :class:`ObjectNotFound` (the sandbox is gone) or :class:`UploadTooLarge`.
        """
        self.signer.verify(method="PUT", key=key, expires=expires, signature=signature)
        path = self.object_path(key)
        if not self._sandbox_is_live(key):
            raise ObjectNotFound("The sandbox this upload URL was issued for no longer exists.")
        if content_length is not None and content_length > self.max_upload_bytes:
            raise UploadTooLarge(
                f"The upload ({content_length} bytes) is larger than the emulator's limit of "
                f"{self.max_upload_bytes} bytes."
            )
        temp = self._tmp / f"upload-{uuid.uuid4()}"
        return UploadWriter(path, temp, self.max_upload_bytes, self._publish_upload)

    def _publish_upload(self, temp: Path, final: Path) -> None:
        """Move a received upload into place, unless its sandbox was released meanwhile."""
        key = final.relative_to(self._root).as_posix()
        match = _SANDBOX_KEY_RE.match(key)
        if match is None:  # pragma: no cover - begin_upload only accepts sandbox keys
            raise ObjectNotFound("This storage URL does not name a valid object.")
        self._sandboxes.expire_due()  # not under the sandbox lock: expiry takes that lock itself
        with self._db.sandbox_lock(match[1]):
            if not self._sandbox_is_live(key, expire=False):
                raise ObjectNotFound("The sandbox this upload URL was issued for no longer exists.")
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temp, final)

    def open_download(
        self, key: str, *, expires: str | None, signature: str | None
    ) -> tuple[BinaryIO, int]:
        """Check a signed ``GET``; return the object opened for reading and its size.

        The caller closes the file. It stays readable even if the sandbox is released
        while it is being streamed.
        """
        self.signer.verify(method="GET", key=key, expires=expires, signature=signature)
        path = self.object_path(key)
        if self._sandbox_is_live(key):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                stream = path.open("rb")
                return stream, os.fstat(stream.fileno()).st_size
        raise ObjectNotFound(
            "The object behind this download URL no longer exists (its sandbox was released)."
        )
