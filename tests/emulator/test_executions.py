"""Executions over real HTTP: upload, execute, status, logs with a byte cursor, artifacts,
requirements in a per-execution venv, failures, time limits, and bad input."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from klavis_emulator import ArchiveLimits, EmulatorConfig, EmulatorServer
from klavis_emulator._exec.requirements import RequirementsRefused, check_requirements
from klavis_emulator._exec.run_log import read_log
from klavis_emulator._state import tenant_for_token
from tests.helpers import Executions, require_confinement, tiny_wheel

#: the last line of a run whose main.py exited 0 (the library reads it: Execution.exit_code)
EXITED_0 = "[emulator] main.py exited with status 0.\n"

WAIT_FOR_GO = """
import os, pathlib, sys, time
print("started", flush=True)
go = pathlib.Path(os.environ["AGENT_WORKSPACE"]) / "go"
deadline = time.monotonic() + 60
while not go.exists():
    if time.monotonic() > deadline:
        sys.exit("no go file")
    time.sleep(0.02)
print("finished")
"""


def _go(emulator: EmulatorServer, sandbox_id: str) -> None:
    (emulator.state.workspace_path(sandbox_id) / "go").write_text("go")


def test_a_run_completes_with_merged_logs_workspace_and_artifacts(
    executions: Executions,
) -> None:
    sandbox_id = executions.acquire()
    main = (
        "import os, sys\n"
        "print('to stdout', flush=True)\n"
        "print('to stderr', file=sys.stderr, flush=True)\n"
        "open(os.path.join(os.environ['AGENT_WORKSPACE'], 'report.txt'), 'w').write('ws')\n"
        "os.makedirs('out', exist_ok=True)\n"
        "open('out/result.txt', 'w').write('artifact')\n"
    )
    assert executions.run(sandbox_id, "first", {"main.py": main, "data.csv": "a,b\n"}) == (
        "completed"
    )
    assert executions.status(sandbox_id, "first").json() == {"status": "completed"}
    logs = executions.logs(sandbox_id, "first")
    assert logs["status"] == "completed"
    assert "to stdout\n" in logs["logs"]
    assert "to stderr\n" in logs["logs"]
    assert logs["cursor"] == len(logs["logs"].encode())
    # Files under AGENT_WORKSPACE land in the workspace the MCP servers (and dump) see.
    assert (executions.emulator.state.workspace_path(sandbox_id) / "report.txt").read_text() == (
        "ws"
    )
    # Files in the working directory are the artifacts, next to the archive's own files.
    members = executions.artifacts(sandbox_id, "first")
    assert members["./out/result.txt"] == b"artifact"
    assert members["./data.csv"] == b"a,b\n"
    assert "./main.py" in members
    assert "." in members


def test_status_goes_pending_running_completed(
    executions: Executions, emulator: EmulatorServer
) -> None:
    sandbox_id = executions.acquire()
    executions.start(sandbox_id, "slow", {"main.py": WAIT_FOR_GO})
    assert executions.status(sandbox_id, "slow").json()["status"] in ("pending", "running")
    assert executions.wait(sandbox_id, "slow", {"running"}) == "running"
    # While it runs: no second start, no export.
    again = executions.execute(sandbox_id, "slow")
    assert again.status_code == 409
    assert "still running" in again.json()["detail"]
    export = executions.http.post(
        f"/local-sandbox/{sandbox_id}/export-artifacts", json={"execution_name": "slow"}
    )
    assert export.status_code == 409
    assert "still running" in export.json()["detail"]
    _go(emulator, sandbox_id)
    assert executions.wait(sandbox_id, "slow") == "completed"
    assert executions.logs(sandbox_id, "slow")["logs"].endswith(
        "started\nfinished\n" + EXITED_0
    )  # the last line says how main.py ended (Execution.exit_code reads it)


def test_non_zero_exit_fails_with_a_log_line(executions: Executions) -> None:
    sandbox_id = executions.acquire()
    status = executions.run(sandbox_id, "boom", {"main.py": "raise SystemExit(3)"})
    assert status == "failed"
    assert "[emulator] main.py exited with status 3." in executions.logs(sandbox_id, "boom")["logs"]
    # A failed run's folder can still be exported.
    assert "./main.py" in executions.artifacts(sandbox_id, "boom")


def test_missing_main_py_fails(executions: Executions) -> None:
    sandbox_id = executions.acquire()
    assert executions.run(sandbox_id, "nomain", {"script.py": "print(1)"}) == "failed"
    assert "has no main.py" in executions.logs(sandbox_id, "nomain")["logs"]


def test_packages_txt_is_reported_as_not_installed(executions: Executions) -> None:
    sandbox_id = executions.acquire()
    files = {"main.py": "print('ok')", "packages.txt": "curl\n# a comment\n\njq\n"}
    assert executions.run(sandbox_id, "pkgs", files) == "completed"
    logs = executions.logs(sandbox_id, "pkgs")["logs"]
    assert "packages.txt lists system packages (curl, jq)" in logs
    assert "NOT installed" in logs


def test_requirements_are_installed_into_a_per_execution_venv(
    executions: Executions, emulator: EmulatorServer
) -> None:
    sandbox_id = executions.acquire()
    files: dict[str, bytes | str] = {
        "main.py": "import tinypkg\nprint('value', tinypkg.VALUE)",
        "requirements.txt": "--no-index\n./tinypkg-0.1-py3-none-any.whl\n",
        "tinypkg-0.1-py3-none-any.whl": tiny_wheel(),
    }
    assert executions.run(sandbox_id, "reqs", files) == "completed"
    logs = executions.logs(sandbox_id, "reqs")["logs"]
    assert "Installing requirements.txt" in logs
    assert "Successfully installed tinypkg-0.1" in logs  # pip's own output
    assert "value 42" in logs
    # The emulator's own environment is untouched, and the venv is not an artifact.
    with pytest.raises(ImportError):
        __import__("tinypkg")
    assert not any(name.startswith("./venv") for name in executions.artifacts(sandbox_id, "reqs"))


def test_failing_requirements_fail_the_run_without_running_main(executions: Executions) -> None:
    sandbox_id = executions.acquire()
    files = {
        "main.py": "print('main ran')",
        "requirements.txt": "--no-index\nsurely-not-a-package-here==1.0\n",
    }
    assert executions.run(sandbox_id, "badreqs", files) == "failed"
    logs = executions.logs(sandbox_id, "badreqs")["logs"]
    assert "pip failed" in logs
    assert "main ran" not in logs


def test_a_name_is_installed_from_a_wheel_folder_in_the_archive(executions: Executions) -> None:
    """The way to vendor packages: wheels in a folder of the archive, found by name."""
    sandbox_id = executions.acquire()
    files: dict[str, bytes | str] = {
        "main.py": "import tinypkg\nprint('value', tinypkg.VALUE)",
        "requirements.txt": (
            "# vendored\n--no-index --find-links ./wheels\n"
            'tinypkg==0.1 ; python_version >= "3"  # pinned\n'
        ),
        "wheels/tinypkg-0.1-py3-none-any.whl": tiny_wheel(),
    }
    assert executions.run(sandbox_id, "wheeldir", files) == "completed"
    logs = executions.logs(sandbox_id, "wheeldir")["logs"]
    assert "(wheels only)" in logs
    assert "Successfully installed tinypkg-0.1" in logs
    assert "value 42" in logs


def test_a_source_only_requirement_fails_with_one_line_saying_what_to_do(
    executions: Executions,
) -> None:
    """Refused before pip runs, in both modes (confined or not, the same rule)."""
    sandbox_id = executions.acquire()
    files = {
        "main.py": "print('main ran')",
        "requirements.txt": "./project\n",
        "project/setup.py": "raise SystemExit('setup.py ran')\n",
    }
    assert executions.run(sandbox_id, "sdist", files) == "failed"
    logs = executions.logs(sandbox_id, "sdist")["logs"]
    emulator_lines = [line for line in logs.splitlines() if line.startswith("[emulator]")]
    refusal = [line for line in emulator_lines if "requirements.txt line 1" in line]
    assert len(refusal) == 1, logs
    assert "('./project') is refused" in refusal[0]
    assert "put the .whl in the archive and list its path" in refusal[0]
    assert "main.py was not run" in refusal[0]
    assert "setup.py ran" not in logs
    assert "main ran" not in logs


WORKDIR_FILES = {"w/a-1.0-py3-none-any.whl": "", "wheels/b-1-py3-none-any.whl": ""}


@pytest.mark.parametrize(
    ("text", "checked"),
    [
        ("", ""),
        ("# only a comment\n\n", ""),
        ("requests\n", "requests\n"),
        ("Requests[socks,security] >= 2.0, < 3\n", "Requests[socks,security] >= 2.0, < 3\n"),
        ('attrs==23.1 ; python_version < "3.12"\n', 'attrs==23.1 ; python_version < "3.12"\n'),
        (
            "a==1 --hash=sha256:00ff --hash sha256:ab\n",
            "a==1 --hash=sha256:00ff --hash=sha256:ab\n",
        ),
        ("./w/a-1.0-py3-none-any.whl\n", "/X/w/a-1.0-py3-none-any.whl\n"),
        ("w/../w/a-1.0-py3-none-any.whl\n", "/X/w/a-1.0-py3-none-any.whl\n"),
        ("https://h.example/a-1-py3-none-any.whl\n", "https://h.example/a-1-py3-none-any.whl\n"),
        ("-i https://pypi.org/simple\n", "--index-url=https://pypi.org/simple\n"),
        ("-ihttps://i.example/simple\n", "--index-url=https://i.example/simple\n"),
        ("--extra-index-url=http://127.0.0.1:9/s\n", "--extra-index-url=http://127.0.0.1:9/s\n"),
        ("--no-index -f wheels\nb\n", "--no-index\n--find-links=/X/wheels\nb\n"),
        ("--find-links .\n", "--find-links=/X\n"),
        ("--trusted-host h.example:8080\n", "--trusted-host=h.example:8080\n"),
        (
            "--pre\n--prefer-binary\n--require-hashes\n",
            "--pre\n--prefer-binary\n--require-hashes\n",
        ),
        ("--only-binary :none:\n--only-binary=:all:\nx\n", "x\n"),
        ("a \\\n  ==1\n", "a ==1\n"),
        ("\ufeffa\n", "a\n"),
    ],
)
def test_checked_requirements(tmp_path: Path, text: str, checked: str) -> None:
    for name in WORKDIR_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert check_requirements(text.encode(), tmp_path, "/X") == checked


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("./w\n", "a local folder, a source archive"),
        ("w/\n", "a local folder, a source archive"),
        ("pkg.tar.gz\n", "a source archive"),
        ("pkg-1.zip\n", "a source archive"),
        ("name @ https://h.example/x.whl\n", "a local folder, a source archive"),
        ("git+https://h.example/r.git\n", "a local folder, a source archive"),
        ("https://h.example/x.tar.gz\n", "a local folder, a source archive"),
        ("file:///x.whl\n", "not a file inside the archive"),
        ("../outside-1-py3-none-any.whl\n", "not a file inside the archive"),
        ("missing-1-py3-none-any.whl\n", "not a file inside the archive"),
        ("-e .\n", "an editable install"),
        ("--editable=.\n", "an editable install"),
        ("--edit .\n", "'--edit' is not accepted"),
        ("--no-binary=:all:\n", "--no-binary asks pip to build"),
        ("-r other.txt\n", "nested requirement and constraint files"),
        ("--constraint c.txt\n", "nested requirement and constraint files"),
        ("a --config-settings=k=v\n", "build options"),
        ("a -C k=v\n", "build options"),
        ("a --global-option=--x\n", "build options"),
        ("a --pre\n", "only --hash may follow a requirement"),
        ("--hash=sha256:ab\n", "--hash must follow a requirement"),
        ("${HOME}\n", "${VARIABLES} are not expanded"),
        ("--index-url file:///x\n", "--index-url takes an http(s) URL"),
        ("--index-url 'https://x'\n", "--index-url takes an http(s) URL"),
        ("--find-links ../..\n", "--find-links takes an http(s) URL or a folder"),
        ("--use-feature=x\n", "'--use-feature' is not accepted"),
        ("-i\n", "-i needs a value"),
    ],
)
def test_refused_requirements(tmp_path: Path, text: str, reason: str) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "setup.py").write_text("")
    with pytest.raises(RequirementsRefused, match="is refused") as refused:
        check_requirements(text.encode(), tmp_path, "/X")
    assert reason in str(refused.value)
    assert "requirements.txt line 1" in str(refused.value)


def test_requirements_that_are_not_utf8_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RequirementsRefused, match="not UTF-8"):
        check_requirements("a\n".encode("utf-16"), tmp_path, "/X")


def test_a_finished_execution_can_run_again(executions: Executions) -> None:
    sandbox_id = executions.acquire()
    assert executions.run(sandbox_id, "twice", {"main.py": "print('one')"}) == "completed"
    assert executions.run(sandbox_id, "twice", {"main.py": "print('two')"}) == "completed"
    logs = executions.logs(sandbox_id, "twice")["logs"]
    assert "two" in logs
    assert "one" not in logs


def test_log_cursor_sees_every_byte_once_and_splits_only_whole_characters(
    executions: Executions, emulator: EmulatorServer
) -> None:
    sandbox_id = executions.acquire()
    main = (
        "import os, pathlib, time\n"
        # One write each (stdout is unbuffered in a run): the log never holds 'héllo '
        # without the two bytes that follow it.
        "os.write(1, 'héllo '.encode() + '€'.encode()[:2])\n"
        "go = pathlib.Path(os.environ['AGENT_WORKSPACE']) / 'go'\n"
        "while not go.exists(): time.sleep(0.02)\n"
        "os.write(1, '€'.encode()[2:] + ' wörld ✓\\n'.encode())\n"
    )
    executions.start(sandbox_id, "utf8", {"main.py": main})
    executions.wait(sandbox_id, "utf8", {"running"})
    # Poll until the first write is visible: it ends inside the 3-byte '€'.
    first = executions.logs(sandbox_id, "utf8")
    seen = first["logs"]
    deadline = time.monotonic() + 60  # a deadline, not a count of polls
    while "héllo " not in seen and time.monotonic() < deadline:
        first = executions.logs(sandbox_id, "utf8", first["cursor"])
        seen += first["logs"]
    assert seen.endswith("héllo ")
    log_file = emulator.state.execution_path(sandbox_id, "utf8") / "output.log"
    # The cursor stopped before the incomplete character (2 of its 3 bytes are written).
    assert log_file.read_bytes()[first["cursor"] :] == "€".encode()[:2]
    again = executions.logs(sandbox_id, "utf8", first["cursor"])
    assert again == {"status": "running", "logs": "", "cursor": first["cursor"]}
    _go(emulator, sandbox_id)
    executions.wait(sandbox_id, "utf8")
    rest = executions.logs(sandbox_id, "utf8", first["cursor"])
    assert rest["logs"] == "€ wörld ✓\n" + EXITED_0
    assert rest["cursor"] == log_file.stat().st_size
    assert seen + rest["logs"] == log_file.read_bytes().decode()
    assert (seen + rest["logs"]).endswith("héllo € wörld ✓\n" + EXITED_0)
    # At the end: nothing more, the cursor stays; past the end: the same.
    assert executions.logs(sandbox_id, "utf8", rest["cursor"])["logs"] == ""
    past = executions.logs(sandbox_id, "utf8", rest["cursor"] + 100)
    assert past == {"status": "completed", "logs": "", "cursor": rest["cursor"] + 100}
    # A cursor inside a character: its stray continuation bytes decode as U+FFFD.
    inside = log_file.read_bytes().index("é".encode()) + 1
    assert executions.logs(sandbox_id, "utf8", inside)["logs"].startswith("\ufffdllo")


def test_invalid_utf8_output_decodes_with_replacement(executions: Executions) -> None:
    sandbox_id = executions.acquire()
    main = "import sys\nsys.stdout.buffer.write(b'bad \\xff\\xfe bytes, cut \\xe2\\x82')"
    assert executions.run(sandbox_id, "binary", {"main.py": main}) == "completed"
    logs = executions.logs(sandbox_id, "binary")
    # The emulator's last line starts a line of its own, after the cut character.
    assert logs["logs"].endswith("bad \ufffd\ufffd bytes, cut \ufffd\n" + EXITED_0)
    log_file = executions.emulator.state.execution_path(sandbox_id, "binary") / "output.log"
    assert log_file.read_bytes().endswith(b"bad \xff\xfe bytes, cut \xe2\x82\n" + EXITED_0.encode())
    assert logs["cursor"] == log_file.stat().st_size
    # Once a run is over, even an incomplete tail is returned (nothing more will come).
    log_file.write_bytes(b"cut \xe2\x82")
    assert read_log(log_file, 0, final=True) == ("cut \ufffd", 6)
    assert read_log(log_file, 0, final=False) == ("cut ", 4)


def test_bad_execution_input(executions: Executions) -> None:
    sandbox_id = executions.acquire()
    base = f"/local-sandbox/{sandbox_id}"
    http = executions.http
    for bad in ("a/b", "../x", "..", ".hidden", "", "a" * 129, "name with space", "é", "a..b"):
        calls = [
            http.post(f"{base}/execution-upload-url", json={"execution_name": bad}),
            http.post(f"{base}/execute", json={"execution_name": bad}),
            http.get(f"{base}/execution-status", params={"execution_name": bad}),
            http.get(f"{base}/execution-logs", params={"execution_name": bad}),
            http.post(f"{base}/export-artifacts", json={"execution_name": bad}),
        ]
        for response in calls:
            assert response.status_code == 400, (bad, response.request.url, response.text)
            assert "Invalid execution name" in response.json()["detail"]
    # Unknown names: 404 with a hint; executing before uploading: 409.
    for response in (
        http.get(f"{base}/execution-status", params={"execution_name": "ghost"}),
        http.get(f"{base}/execution-logs", params={"execution_name": "ghost"}),
        http.post(f"{base}/export-artifacts", json={"execution_name": "ghost"}),
    ):
        assert response.status_code == 404, response.text
        assert "no execution named 'ghost'" in response.json()["detail"]
    not_uploaded = http.post(f"{base}/execute", json={"execution_name": "ghost"})
    assert not_uploaded.status_code == 409
    assert "execution-upload-url" in not_uploaded.json()["detail"]
    # The region of the upload matters.
    executions.upload(sandbox_id, "asia-only", {"main.py": "print(1)"}, region="asia")
    assert executions.execute(sandbox_id, "asia-only").status_code == 409
    in_asia = http.post(
        f"{base}/execute", params={"region": "asia"}, json={"execution_name": "asia-only"}
    )
    assert in_asia.status_code == 200
    # Negative cursors are refused by validation.
    negative = http.get(f"{base}/execution-logs", params={"execution_name": "x", "cursor": -1})
    assert negative.status_code == 422
    assert negative.json()["detail"][0]["loc"] == ["query", "cursor"]


def test_unsafe_execution_archives_are_refused(
    executions: Executions, emulator: EmulatorServer, tmp_path: Path
) -> None:
    import tarfile

    sandbox_id = executions.acquire()
    base = f"/local-sandbox/{sandbox_id}"
    outside = tmp_path / "escaped.txt"
    for name in ("../escaped.txt", str(outside)):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
        url = executions.http.post(
            f"{base}/execution-upload-url", json={"execution_name": "evil"}
        ).json()["upload_url"]
        put = httpx.put(
            url, content=buffer.getvalue(), headers={"Content-Type": "application/gzip"}, timeout=30
        )
        assert put.status_code == 200
        response = executions.execute(sandbox_id, "evil")
        assert response.status_code == 400, response.text
        assert "Archive member" in response.json()["detail"]
    assert not outside.exists()
    assert not (emulator.state.workspace_path(sandbox_id).parent / "escaped.txt").exists()
    # Nothing was started.
    assert executions.status(sandbox_id, "evil").status_code == 404


def test_signed_urls_cover_execution_uploads_and_artifacts(executions: Executions) -> None:
    sandbox_id = executions.acquire()
    base = f"/local-sandbox/{sandbox_id}"
    url = executions.http.post(
        f"{base}/execution-upload-url", json={"execution_name": "signed"}
    ).json()["upload_url"]
    assert "/_storage/upload/" in url
    assert "signature=" in url
    forged = url.replace("signed.tar.gz", "other.tar.gz")
    response = httpx.put(
        forged, content=b"\x1f\x8b", headers={"Content-Type": "application/gzip"}, timeout=30
    )
    assert response.status_code == 403
    assert executions.run(sandbox_id, "signed", {"main.py": "print(1)"}) == "completed"
    export = executions.http.post(f"{base}/export-artifacts", json={"execution_name": "signed"})
    download = export.json()["download_url"]
    assert export.json()["expires_in_minutes"] == 30
    assert "/_storage/download/" in download
    assert httpx.get(download.replace("signature=", "signature=0"), timeout=30).status_code == 403
    assert httpx.put(download, content=b"x", timeout=30).status_code in (403, 405)


@pytest.fixture
def short_limits(tmp_path: Path, token: str) -> Iterator[Executions]:
    """An emulator of this test's own: 1 s per execution, 1 MB uploads, 3 archive members."""
    with (
        EmulatorServer(
            EmulatorConfig(
                data_dir=tmp_path / "data",
                execution_timeout=1,
                max_upload_mb=1,
                archive_limits=ArchiveLimits(max_members=3),
            )
        ) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as http,
    ):
        yield Executions(server, http, token)


def test_runaway_scripts_are_killed_at_the_time_limit(short_limits: Executions) -> None:
    sandbox_id = short_limits.acquire()
    main = "import time\nprint('sleeping', flush=True)\ntime.sleep(600)"
    assert short_limits.run(sandbox_id, "forever", {"main.py": main}) == "failed"
    logs = short_limits.logs(sandbox_id, "forever")["logs"]
    assert "sleeping" in logs
    assert "exceeded the emulator's time limit of 1 s and was killed" in logs


def test_execution_uploads_are_capped(short_limits: Executions) -> None:
    sandbox_id = short_limits.acquire()
    url = short_limits.http.post(
        f"/local-sandbox/{sandbox_id}/execution-upload-url", json={"execution_name": "big"}
    ).json()["upload_url"]
    too_big = b"\x1f\x8b" + bytes(1024 * 1024)
    response = httpx.put(
        url, content=too_big, headers={"Content-Type": "application/gzip"}, timeout=30
    )
    assert response.status_code == 413
    # Past the archive caps: 413 from execute, and nothing runs.
    short_limits.upload(sandbox_id, "many", {f"f{i}.txt": "x" for i in range(4)})
    refused = short_limits.execute(sandbox_id, "many")
    assert refused.status_code == 413
    assert "more than 3 members" in refused.json()["detail"]
    assert short_limits.status(sandbox_id, "many").status_code == 404


@pytest.fixture
def unconfined(tmp_path: Path, token: str) -> Iterator[Executions]:
    """An emulator of this test's own that never uses bubblewrap."""
    with (
        EmulatorServer(
            EmulatorConfig(data_dir=tmp_path / "data", confine_executions=False)
        ) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as http,
    ):
        yield Executions(server, http, token)


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("how", ["release", "reset", "ttl"])
def test_release_reset_and_ttl_kill_running_executions(
    unconfined: Executions, tmp_path: Path, how: str
) -> None:
    sandbox_id = unconfined.acquire()
    pid_file = tmp_path / "pid"
    main = f"import os, pathlib\npathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
    main += WAIT_FOR_GO
    unconfined.start(sandbox_id, "victim", {"main.py": main})
    unconfined.wait(sandbox_id, "victim", {"running"})
    # "started" is printed after the pid file is written: wait for it (a deadline, not a
    # count of polls, which a busy machine could use up before the process starts)
    deadline = time.monotonic() + 60
    while "started" not in unconfined.logs(sandbox_id, "victim")["logs"]:
        assert time.monotonic() < deadline, "the execution never started"
    pid = int(pid_file.read_text())
    assert not _pid_gone(pid)
    state = unconfined.emulator.state
    if how == "release":
        assert unconfined.http.delete(f"/local-sandbox/{sandbox_id}").status_code == 200
    elif how == "reset":
        assert unconfined.http.post(f"/local-sandbox/{sandbox_id}/reset").status_code == 200
        # Same sandbox, but the execution is gone.
        assert unconfined.status(sandbox_id, "victim").status_code == 404
        assert not state.execution_path(sandbox_id, "victim").exists()
    else:
        moved = unconfined.http.post("/_emulator/clock/advance", json={"seconds": 7201})
        assert moved.status_code == 200
        assert unconfined.http.get(f"/local-sandbox/{sandbox_id}").status_code == 404
    assert _pid_gone(pid)


def test_unconfined_runs_say_so_in_the_log(unconfined: Executions) -> None:
    sandbox_id = unconfined.acquire()
    main = "import os\nprint('ws', os.environ['AGENT_WORKSPACE'])\nprint('cwd', os.getcwd())"
    assert unconfined.run(sandbox_id, "loose", {"main.py": main}) == "completed"
    logs = unconfined.logs(sandbox_id, "loose")["logs"]
    assert "[emulator] Not confined: confinement was turned off" in logs
    state = unconfined.emulator.state
    assert f"ws {state.workspace_path(sandbox_id)}" in logs
    assert f"cwd {state.execution_path(sandbox_id, 'loose') / 'work'}" in logs


@pytest.fixture
def needs_confinement() -> None:
    """See :func:`tests.helpers.require_confinement`."""
    require_confinement()


@pytest.mark.usefixtures("needs_confinement")
@pytest.mark.parametrize("allow_network", [False, True])
def test_bubblewrap_confines_runs(tmp_path: Path, token: str, allow_network: bool) -> None:
    with (
        EmulatorServer(
            EmulatorConfig(data_dir=tmp_path / "data", allow_network=allow_network)
        ) as server,
        httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as http,
    ):
        executions = Executions(server, http, token)
        sandbox_id = executions.acquire()
        port = int(server.base_url.rsplit(":", 1)[1])
        main = f"""
import os, socket
print("ws", os.environ["AGENT_WORKSPACE"], "cwd", os.getcwd())
print("env", ",".join(sorted(os.environ)))
open("/data/inside.txt", "w").write("ok")
open("artifact.txt", "w").write("ok")
for path in ("/usr/escaped.txt", {str(tmp_path / "escaped.txt")!r}):
    try:
        open(path, "w").write("x")
        print("wrote", path)
    except OSError as exc:
        print("refused", path, type(exc).__name__)
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
    print("network: yes")
except OSError:
    print("network: no")
"""
        assert executions.run(sandbox_id, "boxed", {"main.py": main}) == "completed"
        logs = executions.logs(sandbox_id, "boxed")["logs"]
        assert "Not confined" not in logs
        assert "ws /data cwd /execution" in logs
        assert "env AGENT_WORKSPACE,HOME,LANG,PATH,PWD,PYTHONIOENCODING,PYTHONUNBUFFERED," in logs
        assert "wrote" not in logs
        assert logs.count("refused") == 2
        assert not (tmp_path / "escaped.txt").exists()
        assert (server.state.workspace_path(sandbox_id) / "inside.txt").read_text() == "ok"
        assert executions.artifacts(sandbox_id, "boxed")["./artifact.txt"] == b"ok"
        assert ("network: yes" if allow_network else "network: no") in logs


def test_executions_belong_to_their_tenant(
    executions: Executions, emulator: EmulatorServer, token: str
) -> None:
    sandbox_id = executions.acquire()
    assert executions.run(sandbox_id, "mine", {"main.py": "print('secret')"}) == "completed"
    with httpx.Client(
        base_url=emulator.base_url, headers={"Authorization": f"Bearer other-{token}"}, timeout=30
    ) as intruder:
        for response in (
            intruder.get(
                f"/local-sandbox/{sandbox_id}/execution-logs", params={"execution_name": "mine"}
            ),
            intruder.post(
                f"/local-sandbox/{sandbox_id}/export-artifacts", json={"execution_name": "mine"}
            ),
        ):
            assert response.status_code == 404
            assert "secret" not in response.text
    with pytest.raises(Exception, match="not found"):
        emulator.state.execution_status(tenant_for_token("someone-else"), sandbox_id, "mine")
