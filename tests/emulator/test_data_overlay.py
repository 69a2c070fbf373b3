"""The data folder's overlays (``klavis_emulator/_exec/data_overlay.py``, issue 32 point 9): the
state reaches its tenant folders through them, and where they cannot be made (or confinement is
off) it binds the folders as before and says why. What a confined process reads in ``/proc``,
and the holder's end with a SIGKILLed emulator, are in ``test_attacks_host_paths.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from klavis_emulator import EmulatorConfig
from klavis_emulator._exec.confinement import bwrap_args
from klavis_emulator._exec.data_overlay import inside_path
from klavis_emulator._state import EmulatorState
from tests.helpers import require_confinement, require_data_overlay


def test_seeded_files_are_the_overlays_and_outlive_the_holder(tmp_path: Path) -> None:
    """A file the state writes through the overlay is in the upper folder once the holder is
    gone (a restart finds it); the sandbox's bwrap enters the holder's namespaces."""
    confinement = require_confinement()
    state = EmulatorState(EmulatorConfig(data_dir=tmp_path, reaper_interval=None))
    try:
        holder = require_data_overlay(state)
        record = state.acquire("tenant", ["filesystem"], ttl_seconds=None)
        workspace = state.workspace_path(record.id)
        assert inside_path(workspace) == (holder.pid, str(tmp_path / "workspaces" / record.id))
        (workspace / "kept.txt").write_text("kept")
        assert confinement.bwrap is not None
        args = bwrap_args(confinement.bwrap, workspace=workspace, env={})
        assert args[0].endswith("nsenter")
        assert f"--target={holder.pid}" in args
        assert ["--bind", str(tmp_path / "workspaces" / record.id), "/data"] == args[
            args.index("/data") - 2 : args.index("/data") + 1
        ]
    finally:
        state.close()
    assert not holder.alive()
    assert (tmp_path / "workspaces" / record.id / "kept.txt").read_text() == "kept"


def test_where_the_overlays_cannot_be_made_the_folders_are_bound_and_the_log_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its folder taken by a file: no holder, one WARNING naming the data folder and the cause,
    and the state works on the folders themselves (plain binds, no ``nsenter``)."""
    confinement = require_confinement()
    (tmp_path / ".overlay").write_text("not a folder")
    with caplog.at_level("WARNING", logger="klavis_emulator"):
        state = EmulatorState(EmulatorConfig(data_dir=tmp_path, reaper_interval=None))
    try:
        said = [r.getMessage() for r in caplog.records if "mountinfo" in r.getMessage()]
        assert len(said) == 1, said
        assert str(tmp_path) in said[0]
        assert "could not be made" in said[0]
        assert state.data_overlay is None
        assert state.data_overlay_problem in said[0]
        record = state.acquire("tenant", ["filesystem"], ttl_seconds=None)
        workspace = state.workspace_path(record.id)
        assert workspace == tmp_path / "workspaces" / record.id
        assert confinement.bwrap is not None
        assert bwrap_args(confinement.bwrap, workspace=workspace, env={})[0] == confinement.bwrap
    finally:
        state.close()


def test_unconfined_there_is_no_holder(tmp_path: Path) -> None:
    state = EmulatorState(
        EmulatorConfig(data_dir=tmp_path, reaper_interval=None, confine_executions=False)
    )
    try:
        assert state.data_overlay is None
        assert "unconfined" in state.data_overlay_problem
        assert state.folders.workspaces == tmp_path / "workspaces"
        assert not os.path.exists(tmp_path / ".overlay")
    finally:
        state.close()
