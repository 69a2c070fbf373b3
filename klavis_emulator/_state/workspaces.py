"""What goes in and out of a sandbox's workspace: seeding it from an uploaded ``tar.gz``,
dumping it as one, and emptying it on reset.

The workspace folder itself belongs to the sandbox (see :mod:`.sandboxes`) and keeps its
identity: ``initialize`` and ``reset`` swap its *contents* (a reset may first make a fresh
folder the workspace, see :meth:`.sandboxes.Sandboxes.supply_fresh_workspaces`). A seed is
checked and extracted into a staging copy first, whose contents replace the workspace's only
on success, so a refused archive changes nothing.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from .._archive import ArchiveLimits, extract_archive
from .._signing import SignedUrl
from .._workspace import copy_tree, remove_tree
from .errors import NO_SPACE_ERRNOS, NoUploadedArchive, OutOfSpace
from .sandboxes import Sandboxes, SandboxPart
from .storage import Region, Storage

__all__ = ["Workspaces"]


class Workspaces(SandboxPart):
    """Seed, dump and empty the workspaces of one emulator."""

    def __init__(
        self, sandboxes: Sandboxes, storage: Storage, archive_limits: ArchiveLimits
    ) -> None:
        super().__init__(sandboxes)
        self._tmp = sandboxes.folders.workspaces_tmp  # renames stay on the workspaces' side
        self._storage = storage
        self._archive_limits = archive_limits

    def clear(self, sandbox_id: str, workspace: Path) -> None:
        """Empty the workspace of a sandbox being reset (the folder stays)."""
        self._swap_contents(workspace, None)

    @staticmethod
    def _upload_key(sandbox_id: str, region: str) -> str:
        return f"sandboxes/{sandbox_id}/workspace-upload-{region}.tar.gz"

    def upload_url(self, tenant: str, sandbox_id: str, region: Region, base_url: str) -> SignedUrl:
        """A signed ``PUT`` URL where the workspace archive for ``region`` is to be uploaded."""
        self._sandboxes.live(tenant, sandbox_id)
        return self._storage.upload_url(self._upload_key(sandbox_id, region), base_url)

    def initialize(self, tenant: str, sandbox_id: str, region: Region) -> int:
        """Extract the uploaded archive into the workspace; return the number of members.

        The archive is checked and extracted into a staging copy of the workspace, whose
        contents replace the workspace's only on success: a refused archive changes nothing.
        """
        self._sandboxes.live(tenant, sandbox_id)
        archive = self._storage.object_path(self._upload_key(sandbox_id, region))
        with self._db.sandbox_lock(sandbox_id):
            workspace = self._sandboxes.workspace_locked(tenant, sandbox_id)
            if not archive.is_file():
                raise NoUploadedArchive(
                    f"No archive was uploaded for local sandbox {sandbox_id} in region "
                    f"{region!r}: PUT a tar.gz to the URL from POST /local-sandbox/"
                    f"{sandbox_id}/upload-url?region={region} first."
                )
            staging = self._staged_copy(workspace)
            try:
                count = extract_archive(archive, staging, self._archive_limits)
            except BaseException:
                remove_tree(staging)
                raise
            self._swap_contents(workspace, staging)
        self._sandboxes.touch(sandbox_id)
        return count

    def fill_from(self, tenant: str, sandbox_id: str, folder: Path, *, leave_out: str) -> None:
        """Replace what the workspace holds by a copy of ``folder`` (without its entry
        ``leave_out``), all or nothing, like :meth:`initialize`."""
        with self._db.sandbox_lock(sandbox_id):
            workspace = self._sandboxes.workspace_locked(tenant, sandbox_id)
            staging = self._staged_copy(folder)
            left_out = staging / leave_out
            try:
                if left_out.is_dir() and not left_out.is_symlink():
                    remove_tree(left_out)
            except BaseException:
                remove_tree(staging)
                raise
            self._swap_contents(workspace, staging)
        self._sandboxes.touch(sandbox_id)

    def _staged_copy(self, folder: Path) -> Path:
        """A copy of ``folder`` in the staging area, whose contents :meth:`_swap_contents`
        then moves into a workspace (nothing is left behind if the copy fails)."""
        staging = self._tmp / f"staging-{uuid.uuid4()}"
        try:
            copy_tree(folder, staging)
        except BaseException as exc:
            remove_tree(staging)
            if isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS:
                raise OutOfSpace("copying the workspace to seed it", exc) from exc
            raise
        return staging

    def dump(self, tenant: str, sandbox_id: str, base_url: str) -> SignedUrl:
        """Archive the workspace (members ``.`` and ``./name``) behind a signed ``GET`` URL."""
        self._sandboxes.live(tenant, sandbox_id)
        key = f"sandboxes/{sandbox_id}/dumps/{uuid.uuid4()}.tar.gz"
        with self._db.sandbox_lock(sandbox_id):
            self._sandboxes.workspace_locked(tenant, sandbox_id)
            workspace = self._sandboxes.workspace_to_read(sandbox_id)
            self._storage.archive_to(workspace, key, what="the workspace's dump")
        return self._storage.download_url(key, base_url)

    def _swap_contents(self, workspace: Path, replacement: Path | None) -> None:
        """Replace what ``workspace`` holds by what ``replacement`` holds (or by nothing).

        The folder itself stays (same inode): bind mounts and working directories of
        processes that use the workspace keep pointing at the live contents.
        """
        old = self._tmp / f"old-{uuid.uuid4()}"
        old.mkdir()
        try:
            for name in os.listdir(workspace):
                os.rename(workspace / name, old / name)
            if replacement is not None:
                for name in os.listdir(replacement):
                    os.rename(replacement / name, workspace / name)
                os.chmod(workspace, replacement.stat().st_mode & 0o7777)
        finally:
            remove_tree(old)
            if replacement is not None:
                remove_tree(replacement)
