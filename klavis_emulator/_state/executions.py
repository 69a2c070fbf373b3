"""Executions of a sandbox: their rows, their folders, and the runs going on.

An execution is named by its caller (``execution_name``); its archive is uploaded through a
signed URL, then ``execute`` unpacks it into ``<data_dir>/executions/<id>/<name>/`` and
starts a background run (:class:`~klavis_emulator._exec.runner.ExecutionRun`, which does the
running: this part only records the statuses it reports). A finished execution of the same
name is replaced; executions that were running when the emulator stopped are marked failed
on the next start. Resetting or releasing the sandbox kills its runs and deletes its
executions.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypedDict

from .._archive import ArchiveLimits, extract_archive
from .._exec import (
    FINAL_STATUSES,
    ExecutionRun,
    RunSettings,
    append_note,
    execution_name_problem,
    read_log,
)
from .._signing import SignedUrl
from .._workspace import remove_tree
from .db import from_row
from .errors import ExecutionConflict, ExecutionNotFound, InvalidExecutionName, NoUploadedArchive
from .sandboxes import Sandboxes, SandboxPart
from .storage import Region, Storage

__all__ = ["ExecutionRecord", "Executions", "WaitOptions"]

_ACTIVE: Final = ("pending", "running")


@dataclass(frozen=True)
class ExecutionRecord:
    """An execution as stored."""

    sandbox_id: str
    name: str
    run_id: str
    status: str
    created_ts: float
    started_ts: float | None
    finished_ts: float | None
    exit_code: int | None


def _trash(folder: Path, tmp: Path) -> None:
    """Move ``folder`` out of the way into ``tmp`` (if it exists), then delete it there."""
    if folder.exists():
        trash = tmp / f"old-{uuid.uuid4()}"
        os.rename(folder, trash)
        remove_tree(trash)


class WaitOptions(TypedDict, total=False):
    """The keywords of :meth:`Executions.wait` (for what passes them on)."""

    statuses: Collection[str]
    timeout: float


class Executions(SandboxPart):
    """The executions of one emulator's sandboxes, and their runs."""

    def __init__(
        self,
        sandboxes: Sandboxes,
        storage: Storage,
        *,
        run_settings: RunSettings,
        archive_limits: ArchiveLimits,
    ) -> None:
        super().__init__(sandboxes)
        self._root = sandboxes.folders.executions
        self._tmp = sandboxes.folders.executions_tmp  # renames stay on the executions' side
        self._storage = storage
        self.run_settings = run_settings
        self._archive_limits = archive_limits
        self._runs: dict[tuple[str, str], ExecutionRun] = {}
        self._runs_lock = threading.Lock()
        self._status_changed = threading.Condition()
        self._status_version = 0
        self._fail_interrupted()

    # ------------------------------------------------------------------ a sandbox's end

    def stop(self, sandbox_id: str) -> None:
        """Kill the sandbox's running executions (their outcome is not recorded)."""
        with self._runs_lock:
            keys = [key for key in self._runs if key[0] == sandbox_id]
            runs = [self._runs.pop(key) for key in keys]
        for run in runs:
            run.kill()

    def forget(self, db: sqlite3.Connection, sandbox_id: str) -> None:
        """Delete the execution rows of a sandbox being released or reset."""
        db.execute("DELETE FROM executions WHERE sandbox_id = ?", (sandbox_id,))

    def remove(self, sandbox_id: str) -> None:
        """Delete the execution folders of a released sandbox."""
        remove_tree(self._root / sandbox_id)

    def clear(self, sandbox_id: str, workspace: Path) -> None:
        """Delete the execution folders of a sandbox being reset; wake status waiters."""
        _trash(self._root / sandbox_id, self._tmp)
        self._status_bump()

    def kill_all(self) -> None:
        """Kill every run (the emulator is stopping; they stay ``running`` in the database,
        and the next start marks them failed)."""
        with self._runs_lock:
            runs = list(self._runs.values())
            self._runs.clear()
        for run in runs:
            run.kill()

    def _fail_interrupted(self) -> None:
        """Mark executions that were pending or running when the emulator stopped as failed."""
        with self._db.transaction() as db:
            rows = db.execute(
                "SELECT sandbox_id, name FROM executions WHERE status IN ('pending', 'running')"
            ).fetchall()
            for row in rows:
                with contextlib.suppress(OSError, InvalidExecutionName, ValueError):
                    append_note(
                        self.path(row["sandbox_id"], row["name"]) / "output.log",
                        "The emulator restarted while this execution was running; "
                        "it was stopped and is marked failed.",
                    )
            db.execute(
                "UPDATE executions SET status = 'failed', finished_ts = ? "
                "WHERE status IN ('pending', 'running')",
                (self._clock.time(),),
            )

    # ------------------------------------------------------------------ records

    def path(self, sandbox_id: str, name: str) -> Path:
        """The folder of one execution (``work/``, ``output.log``, ...)."""
        problem = execution_name_problem(name)
        if problem is not None:
            raise InvalidExecutionName(problem)
        return self._root / str(uuid.UUID(sandbox_id)) / name

    @staticmethod
    def _check_name(name: str) -> None:
        problem = execution_name_problem(name)
        if problem is not None:
            raise InvalidExecutionName(problem)

    @staticmethod
    def _upload_key(sandbox_id: str, name: str, region: str) -> str:
        return f"sandboxes/{sandbox_id}/execution-uploads/{region}/{name}.tar.gz"

    def _row(self, db: sqlite3.Connection, sandbox_id: str, name: str) -> ExecutionRecord:
        row = db.execute(
            "SELECT * FROM executions WHERE sandbox_id = ? AND name = ?", (sandbox_id, name)
        ).fetchone()
        if row is None:
            raise ExecutionNotFound(
                f"Local sandbox {sandbox_id} has no execution named {name!r}: upload an archive "
                "with POST .../execution-upload-url, then start it with POST .../execute."
            )
        return from_row(ExecutionRecord, row)

    def get(self, tenant: str, sandbox_id: str, name: str) -> ExecutionRecord:
        """One execution of a sandbox (:class:`ExecutionNotFound` if none was started)."""
        self._sandboxes.live(tenant, sandbox_id)
        self._check_name(name)
        with self._db.transaction() as db:
            return self._row(db, sandbox_id, name)

    # ------------------------------------------------------------------ operations

    def upload_url(
        self, tenant: str, sandbox_id: str, name: str, region: Region, base_url: str
    ) -> SignedUrl:
        """A signed ``PUT`` URL for the archive (``main.py``, ...) of execution ``name``."""
        self._sandboxes.live(tenant, sandbox_id)
        self._check_name(name)
        return self._storage.upload_url(self._upload_key(sandbox_id, name, region), base_url)

    def execute(self, tenant: str, sandbox_id: str, name: str, region: Region) -> None:
        """Unpack the execution's uploaded archive and start running it in the background.

        The archive is checked like a workspace archive (:class:`ArchiveRejected` before
        anything runs). A finished execution of the same name is replaced; a pending or
        running one is a :class:`ExecutionConflict`.
        """
        self._sandboxes.live(tenant, sandbox_id)
        self._check_name(name)
        archive = self._storage.object_path(self._upload_key(sandbox_id, name, region))
        with self._db.sandbox_lock(sandbox_id):
            workspace = self._sandboxes.workspace_locked(tenant, sandbox_id)
            with self._db.transaction() as db, contextlib.suppress(ExecutionNotFound):
                current = self._row(db, sandbox_id, name)
                if current.status in _ACTIVE:
                    raise ExecutionConflict(
                        f"Execution {name!r} of local sandbox {sandbox_id} is still "
                        f"{current.status}; wait for it to finish before running it again."
                    )
            if not archive.is_file():
                raise NoUploadedArchive(
                    f"No archive was uploaded for execution {name!r} of local sandbox "
                    f"{sandbox_id} in region {region!r}: PUT a tar.gz to the URL from POST "
                    f"/local-sandbox/{sandbox_id}/execution-upload-url?region={region} first."
                )
            staging = self._tmp / f"execution-{uuid.uuid4()}"
            try:
                (staging / "work").mkdir(parents=True)
                extract_archive(archive, staging / "work", self._archive_limits)
                (staging / "output.log").touch()
            except BaseException:
                remove_tree(staging)
                raise
            folder = self.path(sandbox_id, name)
            folder.parent.mkdir(parents=True, exist_ok=True)
            _trash(folder, self._tmp)
            os.rename(staging, folder)
            run_id = str(uuid.uuid4())
            with self._db.transaction() as db:
                db.execute(
                    "INSERT INTO executions (sandbox_id, name, run_id, status, created_ts) "
                    "VALUES (?, ?, ?, 'pending', ?) ON CONFLICT (sandbox_id, name) DO UPDATE SET "
                    "run_id = excluded.run_id, status = 'pending', created_ts = "
                    "excluded.created_ts, started_ts = NULL, finished_ts = NULL, exit_code = NULL",
                    (sandbox_id, name, run_id, self._clock.time()),
                )
            run = ExecutionRun(
                folder=folder,
                workspace=workspace,
                settings=self.run_settings,
                on_running=lambda: self._running(sandbox_id, name, run_id),
                on_finished=lambda status, code: self._finished(
                    sandbox_id, name, run_id, status, code
                ),
                label=f"{sandbox_id}/{name}",
            )
            with self._runs_lock:
                self._runs[(sandbox_id, name)] = run
            run.start()
        self._sandboxes.touch(sandbox_id)

    def _running(self, sandbox_id: str, name: str, run_id: str) -> None:
        with contextlib.suppress(RuntimeError), self._db.transaction() as db:
            db.execute(
                "UPDATE executions SET status = 'running', started_ts = ? "
                "WHERE sandbox_id = ? AND name = ? AND run_id = ? AND status = 'pending'",
                (self._clock.time(), sandbox_id, name, run_id),
            )
        self._status_bump()

    def _status_bump(self) -> None:
        with self._status_changed:
            self._status_version += 1
            self._status_changed.notify_all()

    def _finished(
        self, sandbox_id: str, name: str, run_id: str, status: str, exit_code: int | None
    ) -> None:
        with contextlib.suppress(RuntimeError), self._db.transaction() as db:
            db.execute(
                "UPDATE executions SET status = ?, finished_ts = ?, exit_code = ? "
                "WHERE sandbox_id = ? AND name = ? AND run_id = ? "
                "AND status IN ('pending', 'running')",
                (status, self._clock.time(), exit_code, sandbox_id, name, run_id),
            )
        self._status_bump()

    def status(self, tenant: str, sandbox_id: str, name: str) -> str:
        """``pending``, ``running``, ``completed`` or ``failed``."""
        return self.get(tenant, sandbox_id, name).status

    def logs(self, tenant: str, sandbox_id: str, name: str, cursor: int) -> tuple[str, str, int]:
        """``(status, text after the byte cursor, next cursor)``; see :func:`read_log`."""
        if cursor < 0:
            raise ValueError("the cursor must not be negative")
        record = self.get(tenant, sandbox_id, name)
        text, next_cursor = read_log(
            self.path(sandbox_id, name) / "output.log",
            cursor,
            final=record.status in FINAL_STATUSES,
        )
        return record.status, text, next_cursor

    def export_artifacts(self, tenant: str, sandbox_id: str, name: str, base_url: str) -> SignedUrl:
        """Archive a finished execution's working directory behind a signed ``GET`` URL."""
        record = self.get(tenant, sandbox_id, name)
        if record.status not in FINAL_STATUSES:
            raise ExecutionConflict(
                f"Execution {name!r} of local sandbox {sandbox_id} is still {record.status}; "
                "its artifacts can be exported once it has completed or failed."
            )
        key = f"sandboxes/{sandbox_id}/artifacts/{name}/{uuid.uuid4()}.tar.gz"
        with self._db.sandbox_lock(sandbox_id):
            self._sandboxes.workspace_locked(tenant, sandbox_id)
            work = self.path(sandbox_id, name) / "work"
            work.mkdir(parents=True, exist_ok=True)
            self._storage.archive_to(work, key, what="the execution's artifacts")
        return self._storage.download_url(key, base_url)

    def wait(
        self,
        tenant: str,
        sandbox_id: str,
        name: str,
        *,
        statuses: Collection[str] = FINAL_STATUSES,
        timeout: float = 60.0,
    ) -> str:
        """Block until the execution's status is one of ``statuses``; return it (for tests).

        Raises :class:`TimeoutError` after ``timeout`` seconds, and
        :class:`ExecutionNotFound` / :class:`SandboxNotFound` if it disappears.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._status_changed:
                version = self._status_version
            status = self.status(tenant, sandbox_id, name)
            if status in statuses:
                return status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"execution {name!r} is still {status} after {timeout} s")
            with self._status_changed:
                self._status_changed.wait_for(
                    functools.partial(self._status_moved_since, version), timeout=remaining
                )

    def _status_moved_since(self, version: int) -> bool:
        return self._status_version != version
