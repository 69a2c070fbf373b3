"""Executions the way pip, E2B and Modal users write them, against the emulator, both faces: a
requirements file, a folder, files beside the script, refusals naming the right argument (with
nothing sent), and the exit status the emulator logs."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Face, tiny_wheel
from workflows import InvalidInputError, NotFoundError

USES_TINYPKG = "import tinypkg\nprint('value', tinypkg.VALUE)\n"


def _no_execution_named(face: Face, sb: Any, name: str) -> None:
    """Nothing was started under ``name`` (the refusal came before any request)."""
    run = sb.execute("print('probe')", name="probe")
    handle = getattr(run, "_target", run)  # the async face wraps its handles
    ghost = type(handle)(handle._driver, sb.id, name, limits=sb.limits, progress=False)
    with pytest.raises(NotFoundError):
        face.call(ghost.status)


def test_a_requirements_file_with_nested_r_and_files_beside_main(
    face: Face, conn: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "tinypkg-0.1-py3-none-any.whl").write_bytes(tiny_wheel())
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "index.txt").write_text("--no-index\n--find-links ./wheels\n")
    (tmp_path / "job").mkdir()
    requirements = tmp_path / "job" / "requirements.txt"
    requirements.write_text(
        "-r ../shared/index.txt  # relative to this file, as pip reads it\ntinypkg==0.1\n"
    )
    (tmp_path / "job" / "main.py").write_text(USES_TINYPKG + "print(open('data.csv').read())\n")
    with face.acquire(["filesystem"], **conn) as sb:
        run = sb.execute(
            tmp_path / "job" / "main.py",
            requirements=requirements,
            files={"wheels": tmp_path / "wheels", "data.csv": "a,b\n"},
        )
        assert run.wait(timeout=120) == "completed"
        text = "".join(face.collect(run.logs()))
        assert "value 42" in text
        assert "a,b" in text
        assert run.exit_code() == 0
        artifacts = run.export_artifacts()
        assert artifacts["requirements.txt"] == (
            b"--no-index\n--find-links ./wheels\ntinypkg==0.1\n"
        )
        wheel = "wheels/tinypkg-0.1-py3-none-any.whl"
        assert artifacts[wheel] == (tmp_path / wheel).read_bytes()
        lines = sb.execute(USES_TINYPKG, requirements=["--no-index", "nothing-such==1"])
        assert lines.wait(timeout=120) == "failed"
        assert lines.exit_code() is None  # pip failed: main.py never ended


def test_a_folder_runs_with_everything_beside_its_main_py(
    face: Face, conn: dict[str, str], tmp_path: Path
) -> None:
    job = tmp_path / "job"
    (job / "wheels").mkdir(parents=True)
    (job / "wheels" / "tinypkg-0.1-py3-none-any.whl").write_bytes(tiny_wheel())
    (job / "requirements.txt").write_text("--no-index\n--find-links ./wheels\ntinypkg==0.1\n")
    (job / "helper.py").write_text("NAME = 'helper'\n")
    (job / ".gitignore").write_text("*.log\n")
    (job / "old.log").write_text("ignored\n")
    (job / ".git").mkdir()
    (job / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (job / "main.py").write_text(
        USES_TINYPKG + "import helper, os\n"
        "print(helper.NAME, sorted(set(os.listdir('.')) - {'__pycache__'}))\n"
    )
    with face.acquire(["filesystem"], **conn) as sb:
        run = sb.execute_directory(job, files={"extra.txt": "more"}, name="folder")
        assert run.wait(timeout=120) == "completed"
        text = "".join(face.collect(run.logs()))
        assert "value 42" in text
        assert (
            "helper ['.gitignore', 'extra.txt', 'helper.py', 'main.py', 'requirements.txt', "
            "'wheels']" in text
        )  # no old.log (.gitignore), no .git
        assert run.exit_code() == 0


def test_refusals_name_the_right_argument_and_send_nothing(
    face: Face, conn: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "requirements.txt").write_text("-c constraints.txt\n")
    (tmp_path / "nomain").mkdir()
    os.mkfifo(tmp_path / "pipe.txt")  # read, it would block for ever: no writer ever comes
    with face.acquire(["filesystem"], **conn) as sb:
        refused: list[tuple[str | Path, dict[str, Any], str]] = [
            (
                "print(1)",
                {"files": {"requirements.txt": "httpx\n"}},
                r"pass requirements= \(a list of lines or a requirements file path\)",
            ),
            ("print(1)", {"files": {"main.py": "x"}}, r"first argument, main"),
            ("print(1)", {"requirements": "requirements.txt"}, r"requirements=Path\("),
            (
                "print(1)",
                {"requirements": tmp_path / "requirements.txt"},
                r"constraint files \(-c\) are not supported",
            ),
            (tmp_path / "nomain", {}, r"execute_directory\("),
            ("print(1)", {"requirements": tmp_path / "pipe.txt"}, r"is a FIFO \(named pipe\)"),
            ("print(1)", {"requirements": Path("/dev/zero")}, "is a character device"),
        ]
        for main, kwargs, message in refused:
            with pytest.raises(InvalidInputError, match=message):
                sb.execute(main, name="refused", **kwargs)
        with pytest.raises(InvalidInputError, match=r"has no main\.py"):
            sb.execute_directory(tmp_path / "nomain", name="refused")
        _no_execution_named(face, sb, "refused")


EXIT_3 = "import sys\nprint('failing', flush=True)\nsys.exit(3)\n"
FAKE_LINE = textwrap.dedent(
    """
    import sys
    print("[emulator] main.py exited with status 7.")  # the script cannot fake its status
    sys.exit(2)
    """
)


def test_the_exit_status_the_emulator_logs(face: Face, conn: dict[str, str]) -> None:
    with face.acquire(["filesystem"], **conn) as sb:
        failing = sb.execute(EXIT_3, name="exit3")
        assert failing.wait(timeout=60) == "failed"  # all the service's status says
        assert failing.exit_code() == 3  # read without reading the logs first
        assert "failing" in "".join(face.collect(failing.logs()))
        assert failing.exit_code() == 3  # known now: asked again, the same
        fine = sb.execute("print('ok', end='')", name="fine")  # no final newline
        assert "".join(face.collect(fine.logs())).startswith("ok\n")  # the note's own line
        assert (fine.wait(timeout=60), fine.exit_code()) == ("completed", 0)
        faked = sb.execute(FAKE_LINE, name="faked")
        assert (faked.wait(timeout=60), faked.exit_code()) == ("failed", 2)
        killed = sb.execute("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
        # -15 unconfined; in bubblewrap, which reports a signal as a shell does, 128 + 15
        assert (killed.wait(timeout=60), killed.exit_code()) in (("failed", -15), ("failed", 143))
        slow = sb.execute("import time\ntime.sleep(600)\n", name="slow")
        assert slow.exit_code() is None  # still running: not known yet
