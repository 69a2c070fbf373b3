"""A folder changed between planning and packing (issue 32, point 6): what was planned is packed,
or nothing is.

Each case makes a real folder, lets the library plan it, then changes it for real before the
packing starts: the hook is the library's own planner (the module attribute each entry point
calls, wrapped to plan and then swap), so the swap happens exactly between the two, every run.
The changes are the ones an agent or another process sharing the folder can make: a planned
file swapped for a link to a host file, a folder on a planned path swapped for a link to a host
folder holding a file of the same name, a planned file replaced by another file, the root
folder swapped for a link. Every case asserts the error is exactly
:class:`~workflows.SourceChangedError` naming the entry, that no byte of the host file went
anywhere (not in the message, nothing uploaded: the emulator's storage for the sandbox is
empty, the workspace too) and that nothing is left acquired.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import workflows
from klavis_emulator import EmulatorServer
from tests.helpers import Face, import_the_library
from workflows import SourceChangedError
from workflows._execution_input import execution_files
from workflows._pack import pack_to_tempfile

SECRET = "host-secret-bytes-never-packed"


def _project(tmp: Path) -> tuple[Path, Path]:
    """A project (main.py, sub/notes.txt, top.txt) and a host folder beside it holding a
    secret under the same names."""
    project, host = tmp / "project", tmp / "host"
    (project / "sub").mkdir(parents=True)
    (project / "main.py").write_text("print('hi')\n")
    (project / "sub" / "notes.txt").write_text("planned notes")
    (project / "top.txt").write_text("planned top")
    host.mkdir()
    (host / "notes.txt").write_text(SECRET)
    (host / "main.py").write_text(f"print({SECRET!r})\n")
    (host / "sub").mkdir()
    (host / "sub" / "notes.txt").write_text(SECRET)
    return project, host


def _swap_file_for_link(project: Path, host: Path) -> str:
    """Each swap changes the project for real and returns the path the error must name (its
    end, from the project's folder)."""
    (project / "sub" / "notes.txt").unlink()
    (project / "sub" / "notes.txt").symlink_to(host / "notes.txt")
    return "project/sub/notes.txt"


def _swap_folder_for_link(project: Path, host: Path) -> str:
    shutil.rmtree(project / "sub")
    (project / "sub").symlink_to(host)  # host/notes.txt: the planned path leads to the secret
    return "project/sub"


def _replace_file(project: Path, host: Path) -> str:
    os.replace(host / "notes.txt", project / "sub" / "notes.txt")  # another inode in its place
    return "project/sub/notes.txt"


def _swap_root_for_link(project: Path, host: Path) -> str:
    project.rename(project.with_name("moved"))
    project.symlink_to(host)  # same names below it: main.py, sub/notes.txt
    return "project"


SWAPS: dict[str, Callable[[Path, Path], str]] = {
    "file-to-link": _swap_file_for_link,
    "folder-to-link": _swap_folder_for_link,
    "file-replaced": _replace_file,
    "root-to-link": _swap_root_for_link,
}


def _swap_after_planning(
    monkeypatch: pytest.MonkeyPatch, where: list[str], swap: Callable[[], object]
) -> None:
    """Wrap the planner each of ``where`` (``module:name``) calls: plan, then ``swap()``. (The
    faces import the planners when called: the module a planner is defined in is where they
    find it.)"""
    import_the_library()
    for spot in where:
        module, name = spot.split(":")
        planner = getattr(__import__(module, fromlist=[name]), name)

        def plan_then_swap(*args: Any, _planner: Any = planner, **kwargs: Any) -> Any:
            planned = _planner(*args, **kwargs)
            swap()
            return planned

        monkeypatch.setattr(f"{module}.{name}", plan_then_swap)


def _refused(action: Callable[[], object], named: list[str] | str) -> SourceChangedError:
    """Run ``action``: exactly a SourceChangedError naming the path ``named`` ends with (or
    ``named[0]``, what the swap made during ``action``), without a byte of the secret."""
    with pytest.raises(SourceChangedError) as caught:
        action()
    error = caught.value
    fragment = named if isinstance(named, str) else named[0]
    assert type(error) is SourceChangedError
    assert error.path.endswith(fragment), (error.path, str(error))
    assert SECRET not in str(error)
    return error


def _nothing_held(face: Face, conn: dict[str, str]) -> None:
    assert face.list(**conn) == [], "a sandbox was left acquired"
    assert workflows.default_ledger().held() == []


def _nothing_uploaded(emulator: EmulatorServer, sandbox_id: str) -> None:
    stored = emulator.state.data_dir / "storage" / "sandboxes" / sandbox_id
    uploads = [p for p in stored.rglob("*") if p.is_file()] if stored.exists() else []
    assert uploads == [], f"something was uploaded: {uploads}"
    workspace = emulator.state.workspace_path(sandbox_id)
    assert list(workspace.iterdir()) == [], "the workspace changed"


@pytest.mark.parametrize("swap", SWAPS, ids=list(SWAPS))
def test_seed_directory_packs_what_it_planned_or_nothing(
    face: Face,
    conn: dict[str, str],
    emulator: EmulatorServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    swap: str,
) -> None:
    project, host = _project(tmp_path)
    named: list[str] = []
    _swap_after_planning(
        monkeypatch,
        ["workflows._seed._from_folder:plan_directory"],
        lambda: named.append(SWAPS[swap](project, host)),
    )
    with face.acquire(["filesystem"], **conn) as sb:
        _refused(lambda: sb.seed_directory(project), named)
        _nothing_uploaded(emulator, sb.id)
    _nothing_held(face, conn)


@pytest.mark.parametrize("swap", SWAPS, ids=list(SWAPS))
def test_execute_directory_packs_what_it_planned_or_nothing(
    face: Face,
    conn: dict[str, str],
    emulator: EmulatorServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    swap: str,
) -> None:
    project, host = _project(tmp_path)
    named: list[str] = []
    _swap_after_planning(
        monkeypatch,
        ["workflows._execution_input:directory_execution_files"],
        lambda: named.append(SWAPS[swap](project, host)),
    )
    with face.acquire(["filesystem"], **conn) as sb:
        _refused(lambda: sb.execute_directory(project), named)
        _nothing_uploaded(emulator, sb.id)
    _nothing_held(face, conn)


def test_a_file_given_to_execute_is_packed_as_planned(tmp_path: Path) -> None:
    """``files={"name": Path(file)}``: the file itself, never a link put in its place."""
    project, host = _project(tmp_path)
    planned = execution_files("print(1)", files={"notes.txt": project / "sub" / "notes.txt"})
    _swap_file_for_link(project, host)
    error = _refused(lambda: pack_to_tempfile(planned), "project/sub/notes.txt")
    assert "symbolic link" in error.reason


@pytest.mark.parametrize("swap", SWAPS, ids=list(SWAPS))
def test_a_snapshot_of_a_folder_reads_what_it_planned_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: str
) -> None:
    project, host = _project(tmp_path)
    named: list[str] = []
    _swap_after_planning(
        monkeypatch,
        ["workflows._seed._from_folder:plan_directory"],
        lambda: named.append(SWAPS[swap](project, host)),
    )
    _refused(lambda: workflows.Snapshot.from_directory(project), named)


def test_the_error_says_how_the_entry_changed(tmp_path: Path) -> None:
    reasons = {}
    for name, swap in SWAPS.items():
        project, host = _project(tmp_path / name)
        planned = workflows._seed.plan_directory(project)
        swap(project, host)
        with pytest.raises(SourceChangedError) as caught:
            pack_to_tempfile(planned)
        reasons[name] = caught.value.reason
    assert reasons == {
        "file-to-link": "it was replaced by a symbolic link",
        "folder-to-link": "the folder was replaced by a symbolic link",
        "file-replaced": "it was replaced by another file",
        "root-to-link": "the folder was replaced by another one",
    }


def test_an_unchanged_folder_still_packs_through_a_link_the_user_named(tmp_path: Path) -> None:
    """The root named through a link is followed, as planned; links inside stay links."""
    project, _ = _project(tmp_path)
    (project / "sub" / "again.txt").symlink_to("notes.txt")
    (tmp_path / "alias").symlink_to(project)
    snap = workflows.Snapshot.from_directory(tmp_path / "alias")
    assert snap["sub/notes.txt"] == b"planned notes"
    assert dict(snap.links) == {"sub/again.txt": "notes.txt"}
