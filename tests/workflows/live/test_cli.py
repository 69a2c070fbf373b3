"""The ``klavis-sandbox`` CLI against the emulator: in-process ``main`` where only the streams
matter, a real subprocess where the exit status, a closed pipe or a signal does."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import workflows
from tests.helpers import expect_children_to_get_sigint, tiny_wheel
from workflows import LocalSandbox, Snapshot, list_sandboxes
from workflows._cli import EXIT_CODES, main


class Ran(NamedTuple):
    code: int
    out: str
    err: str


Cli = Callable[..., Ran]


@pytest.fixture
def env(conn: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a CLI pointed at the emulator as this test's tenant."""
    monkeypatch.setenv("KLAVIS_API_KEY", conn["api_key"])
    monkeypatch.setenv("KLAVIS_BASE_URL", conn["base_url"])
    return dict(os.environ)


@pytest.fixture
def cli(env: dict[str, str]) -> Cli:
    """``main`` in this process, its stdout and stderr captured apart."""

    def run(*argv: str) -> Ran:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), out=out, err=err)
        return Ran(code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture
def shell(env: dict[str, str]) -> Cli:
    """``python -m workflows`` as a subprocess, as a shell script runs it."""

    def run(*argv: str) -> Ran:
        done = subprocess.run(
            [sys.executable, "-m", "workflows", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        return Ran(done.returncode, done.stdout, done.stderr)

    return run


def test_acquire_prints_only_the_id_for_scripts(shell: Cli, conn: dict[str, Any]) -> None:
    ran = shell("acquire", "filesystem", "--ttl", "600")
    assert ran.code == 0, ran.err
    sandbox_id = ran.out.strip()
    assert ran.out == f"{sandbox_id}\n"  # ID=$(klavis-sandbox acquire filesystem) works
    assert f"klavis-sandbox release {sandbox_id}" in ran.err  # the hint is a message
    assert [i.id for i in list_sandboxes(api_key=conn["api_key"], base_url=conn["base_url"])] == [
        sandbox_id
    ]  # still held after exit

    quiet = shell("acquire", "git", "-q")
    assert (quiet.code, quiet.err) == (0, "")
    assert len(quiet.out.split()) == 1

    full = shell("acquire", "git", "--json", "--quiet")
    record = json.loads(full.out)
    assert full.err == ""
    assert record["servers"][0]["name"] == "git"
    assert f"local_sandbox_id={record['id']}" in record["servers"][0]["mcp_server_url"]
    assert "auth_data" not in record["servers"][0]


def test_list_get_and_json(cli: Cli, conn: dict[str, Any]) -> None:
    assert cli("list") == (0, "", "no active sandboxes\n")
    assert cli("list", "-q") == (0, "", "")
    assert cli("list", "--json") == (0, "[]\n", "")
    sandbox_id = cli("acquire", "filesystem", "git").out.strip()

    listed = cli("list")
    assert listed.out.splitlines()[0].split() == ["ID", "STATUS", "CREATED", "SERVERS"]
    assert sandbox_id in listed.out.splitlines()[1]
    assert [s["id"] for s in json.loads(cli("list", "--json").out)] == [sandbox_id]

    shown = cli("get", sandbox_id)
    assert "status:    occupied" in shown.out
    assert "git/mcp/?local_sandbox_id=" in shown.out
    assert "capabilities" in shown.err  # said where the URLs are printed
    assert "capabilities" not in shown.out
    assert cli("get", sandbox_id, "-q").err == ""
    assert json.loads(cli("get", sandbox_id, "--json").out)["id"] == sandbox_id
    cli("release", sandbox_id)


def test_seed_and_dump_to_a_folder(cli: Cli, tmp_path: Path) -> None:
    sandbox_id = cli("acquire", "filesystem", "-q").out.strip()
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("A")
    (project / "skip.log").write_text("no")
    seeded = cli("seed", sandbox_id, str(project), "--ignore", "*.log", "--no-progress")
    assert seeded == (0, "", f"seeded 1 file into {sandbox_id}\n")
    assert json.loads(cli("seed", sandbox_id, str(project), "--json", "-q").out) == {
        "sandbox_id": sandbox_id,
        "files": 2,
    }

    out = tmp_path / "out"
    dumped = cli("dump", sandbox_id, "-o", str(out), "--json")
    assert dumped.code == 0, dumped.err
    assert json.loads(dumped.out) == {
        "sandbox_id": sandbox_id,
        "path": str(out),
        "format": "folder",
        "files": 2,
        "links": 0,
        "bytes": 3,
    }
    assert dumped.err == f"dumped {sandbox_id} to {out}\n"
    assert Snapshot.from_directory(out) == {"a.txt": "A", "skip.log": "no"}
    cli("release", sandbox_id)


def test_dump_force_puts_the_users_folder_back_when_the_last_rename_fails(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox_id = cli("acquire", "filesystem", "-q").out.strip()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("the user's own")
    real_replace = os.replace

    def failing_last_rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst) == mine and Path(src).name == "dump":  # the dump moving into place
            raise OSError(errno.EXDEV, "simulated failure of the last rename")
        real_replace(src, dst)

    monkeypatch.setattr("workflows._cli._workspace.os.replace", failing_last_rename)
    failed = cli("dump", sandbox_id, "-o", str(mine), "--force")
    monkeypatch.undo()
    assert failed.code == 1
    assert (mine / "keep.txt").read_text() == "the user's own"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "state"]  # no staging left
    cli("release", sandbox_id)


def test_dump_refuses_an_existing_path_unless_forced_and_then_replaces(
    cli: Cli, tmp_path: Path
) -> None:
    sandbox_id = cli("acquire", "filesystem", "-q").out.strip()
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("from the sandbox")
    cli("seed", sandbox_id, str(project), "-q")

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "a.txt").write_text("the user's own")
    (mine / "keep.txt").write_text("also the user's")
    refused = cli("dump", sandbox_id, "-o", str(mine))
    assert refused.code == 1
    assert "already exists" in refused.err
    assert "--force" in refused.err
    assert refused.out == ""
    assert (mine / "a.txt").read_text() == "the user's own"  # nothing touched

    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("dump", sandbox_id, "-o", str(empty), "-q") == (0, "", "")  # nothing to lose
    assert (empty / "a.txt").read_text() == "from the sandbox"

    forced = cli("dump", sandbox_id, "-o", str(mine), "--force")
    assert forced.code == 0, forced.err
    assert "replacing" in forced.err
    assert sorted(p.name for p in mine.iterdir()) == ["a.txt"]  # replaced, not merged
    assert (mine / "a.txt").read_text() == "from the sandbox"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "mine", "proj", "state"]

    for here in (".", ".."):  # the folder the command runs in is never replaced
        ran = cli("dump", sandbox_id, "-o", here, "--force")
        assert (ran.code, "current folder" in ran.err) == (1, True)
    (tmp_path / "alink").symlink_to(mine)
    assert "(a symlink)" in cli("dump", sandbox_id, "-o", str(tmp_path / "alink")).err
    (tmp_path / "alink").unlink()

    archive = tmp_path / "ws.tar.gz"
    archive.write_bytes(b"old")
    assert cli("dump", sandbox_id, "-o", str(archive)).code == 1
    assert archive.read_bytes() == b"old"
    assert cli("dump", sandbox_id, "-o", str(archive), "--force").code == 0
    with tarfile.open(archive, "r:gz") as tar:
        assert "./a.txt" in tar.getnames()
    cli("release", sandbox_id)


def test_dump_writes_archives_as_archives_and_refuses_zip(cli: Cli, tmp_path: Path) -> None:
    sandbox_id = cli("acquire", "filesystem", "-q").out.strip()
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("A")
    cli("seed", sandbox_id, str(project), "-q")

    for name in ("ws.tar.gz", "ws.tgz", "ws.tar"):
        ran = cli("dump", sandbox_id, "-o", str(tmp_path / name), "--json", "-q")
        assert ran.code == 0, ran.err
        summary = json.loads(ran.out)
        assert (summary["format"], summary["bytes"]) == (
            name.split(".", 1)[1].replace("tgz", "tar.gz"),
            (tmp_path / name).stat().st_size,
        )
        assert (tmp_path / name).is_file()
        gzipped = (tmp_path / name).read_bytes()[:2] == b"\x1f\x8b"
        assert gzipped == (name != "ws.tar")  # a .tar is a plain tar
        with tarfile.open(tmp_path / name) as tar:
            member = tar.extractfile("./a.txt")
            assert member is not None
            assert member.read() == b"A"

    refused = cli("dump", sandbox_id, "-o", str(tmp_path / "ws.zip"))
    assert refused.code == 1
    assert ".zip archives are not written" in refused.err
    assert not (tmp_path / "ws.zip").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "proj",
        "state",
        "ws.tar",
        "ws.tar.gz",
        "ws.tgz",
    ]  # no staging folder left behind
    cli("release", sandbox_id)


def test_seed_can_keep_modification_times(cli: Cli, tmp_path: Path) -> None:
    sandbox_id = cli("acquire", "filesystem", "-q").out.strip()
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("A")
    os.utime(project / "a.txt", (1_600_000_000, 1_600_000_000))
    cli("seed", sandbox_id, str(project), "-q")
    cli("dump", sandbox_id, "-o", str(tmp_path / "fixed.tar.gz"), "-q")
    cli("seed", sandbox_id, str(project), "-q", "--preserve-mtime")
    cli("dump", sandbox_id, "-o", str(tmp_path / "kept.tar.gz"), "-q")
    times = {}
    for name in ("fixed", "kept"):
        with tarfile.open(tmp_path / f"{name}.tar.gz") as tar:
            times[name] = tar.getmember("./a.txt").mtime
    assert times == {"fixed": 946_684_800, "kept": 1_600_000_000}
    cli("release", sandbox_id)


def test_release_unknown_ids_and_our_expired_ones(cli: Cli, conn: dict[str, Any]) -> None:
    unknown = "00000000-0000-4000-8000-000000000000"
    ran = cli("release", unknown)
    assert ran.code == 1
    assert f"{unknown}: no such sandbox" in ran.err
    assert ran.out == ""
    assert cli("release", unknown, "--ignore-not-found", "-q") == (0, "", "")
    [record] = json.loads(cli("release", unknown, "--json", "-q").out)
    assert (record["sandbox_id"], record["outcome"]) == (unknown, "not_found")
    assert "no such sandbox" in record["error"]

    sandbox_id = cli("acquire", "git", "-q").out.strip()
    assert cli("release", sandbox_id) == (0, "", f"released {sandbox_id}\n")
    assert cli("release", sandbox_id).code == 1  # released by us: now unknown, like kubectl

    # acquired here, then released behind our back (as its TTL would): not an error
    ours = cli("acquire", "git", "-q").out.strip()
    assert LocalSandbox.attach(
        ours, api_key=conn["api_key"], base_url=conn["base_url"]
    ).release()  # attached: the ledger is not told
    ran = cli("release", ours, "--json")
    assert ran.code == 0
    assert json.loads(ran.out)[0]["outcome"] == "already_released"
    assert "already released" in ran.err

    assert cli("release", "--all") == (0, "", "nothing to release\n")


def test_usage_errors_version_and_documented_exit_codes(shell: Cli) -> None:
    from workflows import __version__

    assert shell("--version") == (0, f"klavis-sandbox {__version__}\n", "")
    assert shell("release").code == 2  # neither ids nor --all
    assert shell("nope").code == 2
    assert shell("dump", "x").code == 2  # -o missing
    helped = shell("--help")
    for code in EXIT_CODES:
        assert f"  {code} " in helped.out
    assert "capabilities" in helped.out
    ran = shell("acquire", "nope")
    assert ran.code == 1
    assert "valid names are" in ran.err
    assert os.environ["KLAVIS_API_KEY"] not in ran.err


def _with_closed_stdout(env: dict[str, str], *argv: str) -> tuple[int, str]:
    """Run the CLI with a stdout whose reader has gone (``| head -1`` after it exited)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "workflows", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    return done.returncode, done.stderr


def test_a_closed_stdout_ends_quietly(env: dict[str, str], conn: dict[str, Any]) -> None:
    held = LocalSandbox.acquire(
        ["git"], ttl_seconds=600, ledger=False, api_key=conn["api_key"], base_url=conn["base_url"]
    )
    for argv in (("list",), ("list", "--json"), ("get", held.id)):
        code, err = _with_closed_stdout(env, *argv)
        assert (code, err) == (141, ""), argv  # no BrokenPipeError traceback
    held.release()

    # the id of an acquired sandbox that nobody can read is a leak: it is released
    code, err = _with_closed_stdout(env, "acquire", "filesystem")
    assert code == 141
    assert "stdout was closed before the sandbox id was read; released" in err
    assert "Traceback" not in err
    assert list_sandboxes(api_key=conn["api_key"], base_url=conn["base_url"]) == []


def test_interrupt_exits_130(env: dict[str, str], cli: Cli, tmp_path: Path) -> None:
    sandbox_id = cli("acquire", "filesystem", "-q").out.strip()
    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    expect_children_to_get_sigint()
    with subprocess.Popen(
        [sys.executable, "-m", "workflows", "exec", sandbox_id, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"  # the script runs: Ctrl-C now
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == "klavis-sandbox: interrupted"
    cli("release", sandbox_id)


def test_exec_streams_output_and_exit_status(cli: Cli, tmp_path: Path) -> None:
    sandbox_id = cli("acquire", "filesystem", "-q").out.strip()
    good = tmp_path / "good.py"
    good.write_text("print('from the sandbox')\n")
    ran = cli("exec", sandbox_id, str(good))
    assert (ran.code, ran.out) == (0, "from the sandbox\n")  # the emulator's notes: stderr
    assert "completed" in ran.err
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nprint('failing')\nsys.exit(2)\n")
    ran = cli("exec", sandbox_id, str(bad), "--name", "bad-run", "-q")
    assert (ran.code, ran.out, ran.err) == (2, "failing\n", "")  # the script's own status
    cli("release", sandbox_id)


def test_exec_takes_requirements_files_like_pip_extra_files_and_folders(
    cli: Cli, tmp_path: Path
) -> None:
    sandbox_id = cli("acquire", "filesystem", "-q").out.strip()
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "tinypkg-0.1-py3-none-any.whl").write_bytes(tiny_wheel())
    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "index.txt").write_text("--no-index\n--find-links ./wheels\n")
    (tmp_path / "reqs" / "all.txt").write_text("-r index.txt\ntinypkg==0.1\n")
    (tmp_path / "data.csv").write_text("a,b\n")
    script = tmp_path / "job.py"
    script.write_text("import tinypkg\nprint('value', tinypkg.VALUE, open('data.csv').read())\n")
    files = ["--file", "wheels", "--file", "data.csv"]
    ran = cli("exec", sandbox_id, str(script), "-r", "reqs/all.txt", *files)
    assert (ran.code, "value 42 a,b" in ran.out) == (0, True), ran.err
    files = ["--file", "wheels/", "--file", str(tmp_path / "data.csv")]
    pins = ["--requirement", "reqs/index.txt", "--with", "tinypkg==0.1"]
    ran = cli("exec", sandbox_id, str(script), *pins, *files)
    assert (ran.code, "value 42 a,b" in ran.out) == (0, True), ran.err
    job = tmp_path / "job"
    job.mkdir()
    (job / "main.py").write_text("import os\nprint(sorted(os.listdir('.')))\n")
    (job / ".gitignore").write_text("*.log\n")
    (job / "run.log").write_text("left out\n")
    (job / "lib.py").write_text("")
    ran = cli("exec", sandbox_id, "job")
    assert (ran.code, "['.gitignore', 'lib.py', 'main.py']\n" in ran.out) == (0, True), ran.err
    cli("release", sandbox_id)


def test_exec_refuses_bad_arguments_naming_the_right_one_before_any_request(
    cli: Cli, shell: Cli, tmp_path: Path
) -> None:
    (tmp_path / "main.py").write_text("print(1)\n")
    (tmp_path / "requirements.txt").write_text("httpx\n")
    (tmp_path / "pinned.txt").write_text("-c constraints.txt\n")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "main.py").write_text("print(1)\n")
    (tmp_path / "job" / "requirements.txt").write_text("httpx\n")
    unknown = "no-such-sandbox"  # a request would answer "not found" (exit 1): none is sent
    refused = {
        ("-r", "httpx"): "-r reads a requirements file, as pip does, and there is no file "
        "'httpx'; to install one package, use --with httpx",
        ("-r", "pinned.txt"): "constraint files (-c) are not supported",
        ("-r", "missing.txt"): "-r missing.txt: missing.txt does not exist",
        ("--file", "main.py"): "--file main.py: the script to run is the SCRIPT argument",
        ("--file", "requirements.txt"): "requirements files are installed with -r requirements.txt",
        ("--file", "nowhere.csv"): "--file nowhere.csv: no such file or folder",
    }
    for extra, message in refused.items():
        ran = cli("exec", unknown, "main.py", *extra)
        assert ran.code == 2, (extra, ran.err)
        assert message in ran.err, (extra, ran.err)
    (tmp_path / "empty").mkdir()
    ran = cli("exec", unknown, "empty")
    assert (ran.code, "'empty' has no main.py at its top level" in ran.err) == (2, True)
    ran = cli("exec", unknown, "job", "--with", "attrs")
    assert (ran.code, "job has a requirements.txt, which is installed" in ran.err) == (2, True)
    ran = cli("exec", unknown, "nothing.py")
    assert (ran.code, ran.err) == (
        2,
        "klavis-sandbox: exec: nothing.py: no such script or folder\n",
    )
    helped = shell("exec", "--help")
    assert "exec exits with the script's own status" in " ".join(helped.out.split())


@pytest.mark.timeout(240)  # a FIFO read would block, 10**7 reads or a quadratic rule take long
def test_exec_reads_requirements_files_within_bounds_naming_file_and_limit(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "main.py").write_text("import tinypkg\nprint('value', tinypkg.VALUE)\n")
    os.mkfifo(tmp_path / "pipe.txt")
    with (tmp_path / "huge.txt").open("wb") as sparse:
        sparse.truncate(64 * 1024**3)
    for level in range(7):  # each names the next 10 times: 11 million reads
        (tmp_path / f"f{level}.txt").write_text(f"-r f{level + 1}.txt\n" * 10)
    (tmp_path / "f7.txt").write_text("attrs\n")
    unknown = "no-such-sandbox"  # a request would answer "not found" (exit 1): none is sent
    refused = {
        "pipe.txt": "-r pipe.txt: pipe.txt is a FIFO (named pipe): requirements are read from "
        "regular files only",
        "/dev/zero": "-r /dev/zero: /dev/zero is a character device",
        "huge.txt": "-r huge.txt: huge.txt is 68,719,476,736 bytes, over the limit of 8,388,608 "
        "bytes (8 MiB) of requirements files",
        "f0.txt": "-r f0.txt: f6.txt line 7 ('-r f7.txt'): -r f7.txt: f7.txt would be "
        "requirements file number 1,001: at most 1,000 are read",
    }
    for name, message in refused.items():
        ran = cli("exec", unknown, "main.py", "-r", name)
        assert (ran.code, message in ran.err) == (2, True), (name, ran.err)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "tinypkg-0.1-py3-none-any.whl").write_bytes(tiny_wheel())
    spaces = " " * (1024 * 1024)  # pip's comment regex: over 20 s per 100 KB of them
    (tmp_path / "spaced.txt").write_text(
        f"--no-index{spaces}# offline\n{spaces}\n--find-links ./wheels{spaces}\ntinypkg==0.1\n"
    )
    sandbox_id = cli("acquire", "filesystem", "-q").out.strip()
    ran = cli("exec", sandbox_id, "main.py", "-r", "spaced.txt", "--file", "wheels")
    assert (ran.code, "value 42" in ran.out) == (0, True), ran.err
    cli("release", sandbox_id)


def test_reap_releases_what_the_ledger_holds(cli: Cli, conn: dict[str, Any]) -> None:
    leaked = LocalSandbox.acquire(["git"], progress=False, **conn)  # as by a killed script
    workflows._ownership.forget(leaked.id, leaked.settings)
    sandbox_id = leaked.id
    assert cli("reap", "--dry-run") == (0, f"{sandbox_id}\n", "")
    assert json.loads(cli("reap", "--dry-run", "--json").out) == [sandbox_id]
    ran = cli("reap", "--json")
    assert (ran.code, json.loads(ran.out)[0]["outcome"]) == (0, "released")
    assert cli("reap") == (0, "", "nothing to release\n")


def test_the_readme_cli_walkthrough_runs_as_a_script(
    env: dict[str, str], conn: dict[str, Any], tmp_path: Path
) -> None:
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    section = readme.split("\n## The CLI\n", 1)[1]
    script = section.split("```bash\n", 1)[1].split("```", 1)[0]
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "a.txt").write_text("A")
    (tmp_path / "project" / "noise.log").write_text("left out")
    (tmp_path / "main.py").write_text("print('hi from main.py')\n")
    (tmp_path / "requirements.txt").write_text("# nothing to install offline\n")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "main.py").write_text("print('job read', open('data.csv').read())\n")
    (tmp_path / "data.csv").write_text("a,b\n")
    scripts_dir = Path(sys.executable).parent  # where the install put `klavis-sandbox`
    assert (scripts_dir / "klavis-sandbox").exists()
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        env={**env, "PATH": f"{scripts_dir}{os.pathsep}{env['PATH']}"},
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # exec > result.txt holds the script's stdout alone; logs prints it again; exec -r once
    assert (tmp_path / "result.txt").read_text() == "hi from main.py\n"
    assert done.stdout.count("hi from main.py") == 2
    assert "job read a,b" in done.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.txt"]
    assert json.loads((tmp_path / "sandbox.json").read_text())["servers"][0]["name"] == "git"
    assert list_sandboxes(api_key=conn["api_key"], base_url=conn["base_url"]) == []


def test_demo_runs_on_the_embedded_emulator(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLAVIS_")}
    env["KLAVIS_SANDBOX_STATE_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "workflows", "demo", "--count", "2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "embedded emulator" in done.stdout
    assert "round-trip dump: ok: 3 files came back" in done.stdout
    assert "dump diff: 1 added, 0 removed, 1 modified" in done.stdout
    # one MCP tool call, answered by the real filesystem server
    tool_call = "4. MCP tool call: filesystem read_text_file /data/hello.txt -> "
    assert f"{tool_call}'Hello from a Klavis local sandbox!'" in done.stdout
    assert "sandboxes still listed: 0" in done.stdout
