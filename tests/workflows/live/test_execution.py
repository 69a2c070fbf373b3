"""Executions and per-server data through the library, against the emulator, both faces."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from klavis_emulator._mcp.setup import find_tools
from tests.helpers import Face
from workflows import InvalidInputError, NotFoundError, RequestValidationError

SCRIPT = textwrap.dedent(
    """
    import os, pathlib, sys
    print("héllo from main")
    print("to stderr", file=sys.stderr)
    pathlib.Path("artifact.txt").write_text("made in the working directory")
    ws = pathlib.Path(os.environ["AGENT_WORKSPACE"])
    (ws / "from_script.txt").write_text("persisted in the workspace")
    print("bye")
    """
)


def test_execute_streams_logs_and_exports(face: Face, conn: dict[str, str]) -> None:
    with face.acquire(["filesystem"], **conn) as sb:
        run = sb.execute(SCRIPT, files={"helper.txt": "extra"}, name="main-run")
        assert run.name == "main-run"
        text = "".join(face.collect(run.logs()))
        assert "héllo from main" in text
        assert "to stderr" in text
        assert text.index("héllo") < text.index("bye")
        assert run.wait(timeout=60) == "completed"
        assert run.status() == "completed"
        artifacts = run.export_artifacts()
        assert artifacts["artifact.txt"] == b"made in the working directory"
        assert artifacts["helper.txt"] == b"extra"
        assert sb.dump()["from_script.txt"] == b"persisted in the workspace"


LINKS = textwrap.dedent(
    """
    import os, pathlib, sys
    pathlib.Path("out.txt").write_text("x")
    pathlib.Path("venv/bin").mkdir(parents=True)
    os.symlink(sys.executable, "venv/bin/python")  # what a venv made by the script holds
    os.symlink("python", "venv/bin/python3")  # through one that leads out
    os.symlink("out.txt", "rel")  # inside
    os.symlink("../out.txt", "venv/up")  # inside
    os.symlink("/data/a.txt", "ws")  # the workspace, not the script's folder
    """
)


def test_export_artifacts_keeps_links_inside_and_skips_the_rest(
    face: Face, conn: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    # one venv made by a script once made every export raise UnsafeArchiveError
    with face.acquire(["filesystem"], **conn) as sb:
        sb.seed({"a.txt": "A"})
        run = sb.execute(LINKS, name="links")
        assert run.wait(timeout=60) == "completed"
        with caplog.at_level(logging.WARNING, logger="workflows"):
            artifacts = run.export_artifacts()
    assert dict(artifacts) == {"main.py": LINKS.encode(), "out.txt": b"x"}
    assert dict(artifacts.links) == {"rel": "out.txt", "venv/up": "../out.txt"}
    assert sorted(artifacts.skipped_links) == ["venv/bin/python", "venv/bin/python3", "ws"]
    assert artifacts.skipped_links["ws"] == "/data/a.txt"
    assert artifacts.skipped_links["venv/bin/python3"] == "python"
    warnings = [r for r in caplog.records if "left out" in r.getMessage()]
    assert len(warnings) == 1
    assert "export_artifacts of 'links': left out 3 symlinks" in warnings[0].getMessage()


def test_failing_script_and_path_main(face: Face, conn: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text("raise SystemExit(3)\n")
    with face.acquire(["filesystem"], **conn) as sb:
        run = sb.execute(script)
        assert run.wait(timeout=60) == "failed"
        (tmp_path / "main.py").write_text("print(1)\n")
        with pytest.raises(InvalidInputError, match="Path"):
            sb.execute("main.py")  # a file name given as text is refused
        with pytest.raises(InvalidInputError, match="execution name"):
            sb.execute("print(1)", name="../up")
        with pytest.raises(InvalidInputError, match="requirements"):
            sb.execute("print(1)", requirements="httpx")


def test_unknown_execution_is_not_found(face: Face, conn: dict[str, str]) -> None:
    with face.acquire(["filesystem"], **conn) as sb:
        run = sb.execute("print('x')", name="known")
        run.wait(timeout=60)
        raw = getattr(run, "_target", run)  # the async face wraps its handles
        ghost = type(raw)(raw._driver, sb.id, "never-started", limits=sb.limits, progress=False)
        with pytest.raises(NotFoundError):
            face.call(ghost.status)


def test_server_data_round_trip(face: Face, conn: dict[str, str]) -> None:
    with face.acquire(["canvas", "google_cloud"], **conn) as sb:
        message = sb.initialize_server_data("canvas", default=True)
        assert isinstance(message, str)
        dumped = sb.dump_server_data("canvas")
        assert dumped.sandbox_id == sb.id
        assert dumped.data
        sb.initialize_server_data("canvas", dumped.data)
        assert sb.dump_server_data("canvas").data == dumped.data
        with pytest.raises(InvalidInputError, match="does not hold"):
            sb.dump_server_data("poste_email_toolathlon")
        with pytest.raises(InvalidInputError, match="no data documents"):
            sb.dump_server_data("git")
        with pytest.raises((InvalidInputError, RequestValidationError)):
            sb.initialize_server_data("google_cloud", {"bigquery_datasets": "not a list"})


def test_mail_data_goes_to_the_sandboxes_mail_server(face: Face, conn: dict[str, str]) -> None:
    missing = find_tools().missing_outside("poste_email_toolathlon")
    if missing:
        pytest.skip(f"poste_email_toolathlon's mail server: {missing}")
    mail = {"subject": "Hello", "from_addr": "ann@example.com", "to_addr": "agent@mcp.com"}
    with face.acquire(["poste_email_toolathlon"], **conn) as sb:
        sb.initialize_server_data(
            "poste_email_toolathlon",
            {"users": {"agent@mcp.com": {"emails": [{**mail, "folder": "Archive"}]}}},
        )
        users = sb.dump_server_data("poste_email_toolathlon").data["users"]
        (message,) = users["agent@mcp.com"]["emails"]  # read back from the mail server
        assert message["folder"] == "Archive"
        assert message["email_id"] == "1"  # assigned by the server
        with pytest.raises((InvalidInputError, RequestValidationError), match="mailbox name"):
            sb.initialize_server_data(
                "poste_email_toolathlon",
                {"users": {"agent@mcp.com": {"emails": [{**mail, "folder": "../x"}]}}},
            )
