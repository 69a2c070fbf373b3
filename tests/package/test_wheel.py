"""The built wheel, installed as a user installs it: imports, ``py.typed``, the commands, the
one-line errors for missing extras, and ``mypy --strict`` on a user's program.

Two environments, made once per test run (shared by the xdist workers under a file lock):

- ``bare``: a fresh venv with ``pip install <wheel>`` and nothing else, its dependencies
  resolved by pip from the index (pip's cache makes it a few seconds; a cold CI ~15 s). The
  extras are missing here, and each says so in one line.
- ``full``: a fresh venv with the wheel installed ``--no-deps``, and the dependencies of the
  ``emulator`` and ``mcp`` extras taken from the venv running the tests (a ``.pth`` line
  appends its site-packages; ``.pth`` files found there are not run, so the editable install
  of this project is not seen: the test checks that every import comes from the wheel).
  Resolving and installing those extras afresh took 91 s on a warm cache, most of it waiting on
  the index, for nothing more than the test venv already proves: it is installed from the same
  extras (``dev`` includes them). ``test_the_full_venv_has_every_requirement_of_its_extras``
  checks that the wheel's own metadata is met there.

- ``harness``: a fresh venv as a benchmark harness pinning ``mcp`` 1.x has it: the wheel with
  its ``mcp`` extra, ``mcp==1.12.1`` and ``pydantic==2.11.7`` (as MCP-Atlas and MCPMark lock
  them), resolved by pip; the emulator extra cannot join them (``pip --dry-run`` shows the
  conflict), so the emulator is started from another environment with ``EmulatorProcess``:
  the venv running the tests, on ``PATH`` after the harness's as a tool install would be.

``notebooks`` is left out: Jupyter, pandas and matplotlib are hundreds of MB, and no module of
the wheel imports them (the notebooks, which do, are tested under ``tests/notebooks``). ``dev``
is the test venv itself.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from klavis_emulator._extra import EXTRA_MODULES, missing_message
from tests.helpers import emulator_process
from workflows import LocalSandbox

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("klavis_archive", "workflows", "klavis_emulator", "klavis_sandbox_client")
EMULATOR_MISSING = missing_message(EXTRA_MODULES)
MCP_MISSING = (
    "talking to MCP servers needs the mcp extra (mcp>=1.12,<3): pip install 'klavis-sandbox[mcp]'"
)

# (venv, command, arguments): each must exit 0 and print its usage or version on stdout.
# `--version` joins here once the commands have it.
COMMANDS = [
    ("bare", "klavis-sandbox", "--help"),
    ("full", "klavis-sandbox", "--help"),
    ("full", "klavis-emulator", "--help"),
    ("bare", "klavis-sandbox", "--version"),
    ("full", "klavis-emulator", "--version"),
]


@dataclass(frozen=True)
class Venv:
    path: Path

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def bin(self, name: str) -> str:
        return str(self.path / "bin" / name)

    def run(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> Completed:
        """Run one of the venv's programs (or ``python``) in ``cwd``, away from the sources."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("KLAVIS_", "PYTHON"))}
        done = subprocess.run(
            [self.bin(args[0]), *args[1:]],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**clean, **(env or {})},
            timeout=300,
        )
        return Completed(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class Completed:
    code: int
    out: str
    err: str


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"pip {' '.join(args)}:\n{done.stdout}{done.stderr}"


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's folder for the wheel and the venvs, shared by its xdist workers."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "wheel-test"


@pytest.fixture(scope="session")
def wheel(built: Path) -> Path:
    with _locked(built):
        found = sorted((built / "dist").glob("klavis_sandbox-*.whl"))
        if not found:
            _pip("wheel", "--no-deps", "--wheel-dir", str(built / "dist"), str(ROOT))
            found = sorted((built / "dist").glob("klavis_sandbox-*.whl"))
        assert len(found) == 1, found
        return found[0]


def _venv(folder: Path, *pip_args: str) -> None:
    """A fresh venv without pip of its own (saves seconds): the tests' pip installs into it."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--clear", "--without-pip", str(folder)],
        check=True,
        timeout=120,
    )
    _pip("--python", str(folder / "bin" / "python"), "install", *pip_args)


@pytest.fixture(scope="session")
def bare(built: Path, wheel: Path) -> Venv:
    venv = Venv(built / "bare")
    with _locked(built):
        if not (venv.path / ".ready").exists():
            _venv(venv.path, str(wheel))
            (venv.path / ".ready").touch()
    return venv


@pytest.fixture(scope="session")
def full(built: Path, wheel: Path) -> Venv:
    venv = Venv(built / "full")
    with _locked(built):
        if not (venv.path / ".ready").exists():
            _venv(venv.path, "--no-deps", str(wheel))
            site = subprocess.run(
                [venv.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            ours = sysconfig.get_paths()["purelib"]
            Path(site, "zz_test_dependencies.pth").write_text(ours + "\n")
            (venv.path / ".ready").touch()
    return venv


WHERE = textwrap.dedent(
    """
    import importlib, importlib.resources, json
    found = {}
    for name in ("klavis_archive", "workflows", "klavis_emulator", "klavis_sandbox_client"):
        module = importlib.import_module(name)
        typed = importlib.resources.files(name).joinpath("py.typed").is_file()
        found[name] = [module.__file__, typed]
    print(json.dumps(found))
    """
)


@pytest.mark.parametrize("name", ["bare", "full"])
def test_imports_come_from_the_wheel_with_py_typed(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    venv: Venv = request.getfixturevalue(name)
    done = venv.run("python", "-c", WHERE, cwd=tmp_path)
    assert done.code == 0, done.err
    found = json.loads(done.out)
    assert set(found) == set(PACKAGES)
    for package, (location, typed) in found.items():
        assert Path(location).is_relative_to(venv.path), (package, location)
        assert typed, f"{package} has no py.typed"


@pytest.mark.parametrize(("name", "command", "argument"), COMMANDS)
def test_commands(
    name: str, command: str, argument: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    venv: Venv = request.getfixturevalue(name)
    done = venv.run(command, argument, cwd=tmp_path)
    assert done.code == 0, done.err
    if argument == "--help":
        assert done.out.startswith(f"usage: {command} "), done.out
    else:
        assert "0.1.0" in done.out, done.out


@pytest.mark.parametrize(
    "command",
    [
        ("klavis-emulator", "--help"),
        ("klavis-emulator", "setup"),
        ("python", "-m", "klavis_emulator"),
    ],
)
def test_klavis_emulator_without_its_extra_says_which_in_one_line(
    command: tuple[str, ...], bare: Venv, tmp_path: Path
) -> None:
    done = bare.run(*command, cwd=tmp_path)
    assert (done.code, done.out, done.err) == (1, "", EMULATOR_MISSING + "\n")


def test_the_demo_without_a_key_or_the_emulator_names_the_extra(bare: Venv, tmp_path: Path) -> None:
    # no klavis-emulator that can serve on PATH: the bare venv's only says its extra is missing
    path = os.pathsep.join([str(bare.path / "bin"), "/usr/bin", "/bin"])
    done = bare.run("klavis-sandbox", "demo", cwd=tmp_path, env={"PATH": path})
    assert (done.code, done.out) == (1, "")
    assert (
        "needs the emulator extra (or a klavis-emulator on PATH, which it starts): pip "
        "install 'klavis-sandbox[emulator]'"
    ) in done.err
    assert len(done.err.splitlines()) == 1, done.err


def test_importing_the_emulator_without_its_extra_names_it(bare: Venv, tmp_path: Path) -> None:
    program = textwrap.dedent(
        """
        import klavis_emulator  # importing works: only its names need the extra
        try:
            klavis_emulator.EmulatorServer
        except ModuleNotFoundError as exc:
            print(type(exc).__name__, exc)
        """
    )
    done = bare.run("python", "-c", program, cwd=tmp_path)
    assert (done.code, done.err) == (0, "")
    assert done.out == f"EmulatorExtraMissing {EMULATOR_MISSING}\n"


MCP_PROGRAM = textwrap.dedent(
    """
    import asyncio
    from workflows import KlavisError, LocalSandbox, AsyncLocalSandbox

    with LocalSandbox.acquire(["git"], ttl_seconds=600) as sb:
        try:
            print(sorted(t.name for t in sb.list_tools("git"))[:2])
        except KlavisError as exc:
            print(type(exc).__name__, exc)

    async def main():
        async with AsyncLocalSandbox.acquire(["git"], ttl_seconds=600) as sb:
            try:
                async with sb.mcp("git") as session:
                    print(len((await session.list_tools()).tools) > 0)
            except KlavisError as exc:
                print(type(exc).__name__, exc)

    asyncio.run(main())
    """
)


def test_mcp_helpers_without_their_extra_name_it(
    bare: Venv, tmp_path: Path, emulator_url: str, token: str
) -> None:
    env = {"KLAVIS_BASE_URL": emulator_url, "KLAVIS_API_KEY": token}
    done = bare.run("python", "-c", MCP_PROGRAM, cwd=tmp_path, env=env)
    assert (done.code, done.err) == (0, "")
    assert done.out.splitlines() == [f"MissingExtraError {MCP_MISSING}"] * 2
    assert LocalSandbox.list(api_key=token, base_url=emulator_url) == []


def test_mcp_helpers_with_their_extra(
    full: Venv, tmp_path: Path, emulator_url: str, token: str
) -> None:
    env = {"KLAVIS_BASE_URL": emulator_url, "KLAVIS_API_KEY": token}
    done = full.run("python", "-c", MCP_PROGRAM, cwd=tmp_path, env=env)
    assert done.code == 0, done.err
    assert done.out.splitlines() == ["['git_add', 'git_branch']", "True"]


def test_the_installed_emulator_serves(
    full: Venv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    monkeypatch.chdir(tmp_path)  # `python -m` would find the sources in the project's folder
    with emulator_process(full.python, tmp_path / "data") as url:
        assert httpx.get(f"{url}/_emulator/health", timeout=30).status_code == 200


@pytest.fixture(scope="session")
def harness(built: Path, wheel: Path) -> Venv:
    venv = Venv(built / "harness")
    with _locked(built):
        if not (venv.path / ".ready").exists():
            _venv(venv.path, f"{wheel}[mcp]", *HARNESS_PINS)
            (venv.path / ".ready").touch()
    return venv


HARNESS_PINS = ("mcp==1.12.1", "pydantic==2.11.7")


def _dry_run(*requirements: str) -> subprocess.CompletedProcess[str]:
    """What pip would install for ``requirements`` in an empty environment (nothing installed)."""
    return subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--disable-pip-version-check", "install"),
            *("--dry-run", "--ignore-installed", "--quiet", "--report", "-", *requirements),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_mcp_extra_resolves_beside_mcp_1_12_1_and_the_emulator_extra_does_not(
    wheel: Path,
) -> None:
    alone = _dry_run(f"{wheel}[mcp]", "mcp==1.12.1")
    assert alone.returncode == 0, alone.stderr
    chosen = {
        item["metadata"]["name"]: item["metadata"]["version"]
        for item in json.loads(alone.stdout)["install"]
    }
    assert chosen["mcp"] == "1.12.1"
    assert chosen["klavis-sandbox"] == "0.1.0"
    together = _dry_run(f"{wheel}[emulator,mcp]", "mcp==1.12.1")
    assert together.returncode != 0
    assert "ResolutionImpossible" in together.stderr, together.stderr


HARNESS_PROGRAM = textwrap.dedent(
    """
    import asyncio, importlib.metadata as m, importlib.util as u, json
    import klavis_emulator
    from workflows import AsyncLocalSandbox, EmulatorProcess, async_list_sandboxes

    facts = {"mcp": m.version("mcp"), "fastmcp": u.find_spec("fastmcp") is not None}
    try:
        klavis_emulator.EmulatorServer
        facts["emulator_here"] = True
    except ModuleNotFoundError:
        facts["emulator_here"] = False

    async def main():
        conn = {"api_key": "harness"}
        with EmulatorProcess(args=["--no-mcp-at-acquire"]) as emulator:
            conn["base_url"] = emulator.base_url
            facts["command"] = emulator.command
            async with AsyncLocalSandbox.acquire(["filesystem"], ttl_seconds=600, **conn) as sb:
                await sb.seed({"notes/hello.txt": "from the harness"})
                async with sb.mcp("filesystem") as session:
                    facts["session"] = f"{type(session).__module__}.{type(session).__name__}"
                    roots = await session.call_tool("list_allowed_directories", {})
                    root = roots.content[0].text.split()[-1]
                    path = {"path": f"{root}/notes/hello.txt"}
                    read = await session.call_tool("read_text_file", path)
                    facts["read"] = read.content[0].text
            facts["left"] = len(await async_list_sandboxes(**conn))
        facts["stopped"] = not emulator.running

    asyncio.run(main())
    print(json.dumps(facts))
    """
)


def _harness_path(harness: Venv) -> str:
    """PATH with the harness's venv first (as when it is activated), then the venv running the
    tests (which has the emulator extra), as a pipx or uv tool install puts its command."""
    tool = sysconfig.get_path("scripts")
    return os.pathsep.join([str(harness.path / "bin"), tool, os.environ.get("PATH", "")])


def test_a_harness_venv_with_mcp_1_drives_an_emulator_of_another_environment(
    harness: Venv, tmp_path: Path
) -> None:
    done = harness.run(
        "python", "-c", HARNESS_PROGRAM, cwd=tmp_path, env={"PATH": _harness_path(harness)}
    )
    assert done.code == 0, done.err
    facts = json.loads(done.out)
    assert facts == {
        "mcp": "1.12.1",
        "fastmcp": False,
        "emulator_here": False,
        "command": [str(Path(sysconfig.get_path("scripts"), "klavis-emulator"))],
        "session": "mcp.client.session.ClientSession",
        "read": "from the harness",
        "left": 0,
        "stopped": True,
    }
    assert Path(harness.bin("klavis-emulator")).is_file()  # there, and skipped


def test_the_demo_in_a_harness_venv_uses_an_emulator_of_another_environment(
    harness: Venv, tmp_path: Path
) -> None:
    done = harness.run("klavis-sandbox", "demo", cwd=tmp_path, env={"PATH": _harness_path(harness)})
    assert done.code == 0, done.out + done.err
    tool = Path(sysconfig.get_path("scripts"), "klavis-emulator")
    assert done.out.startswith(f"No KLAVIS_API_KEY set: using {tool} at http://127.0.0.1:")
    assert "4. MCP tool call: filesystem read_text_file /data/hello.txt" in done.out
    assert "8. sandboxes still listed: 0" in done.out


def test_in_a_harness_venv_the_missing_extra_hint_keeps_its_mcp_pin(
    harness: Venv, tmp_path: Path
) -> None:
    """Issue 35, point 3: where mcp is 1.x, ``pip install 'klavis-sandbox[emulator]'`` would
    bring mcp 2.x into the harness's venv; the hint names the tool route and EmulatorProcess."""
    bare_path = os.pathsep.join([str(harness.path / "bin"), "/usr/bin", "/bin"])
    emulator = harness.run("klavis-emulator", "--port", "0", cwd=tmp_path)
    demo = harness.run("klavis-sandbox", "demo", cwd=tmp_path, env={"PATH": bare_path})
    for done in (emulator, demo):
        assert (done.code, done.out, len(done.err.splitlines())) == (1, "", 1), done.err
        assert "needs the emulator extra" in done.err
        assert "not with pip install 'klavis-sandbox[emulator]' here" in done.err
        assert "would replace this environment's mcp 1.12.1 with mcp 2.x" in done.err
        assert "uv tool install 'klavis-sandbox[emulator]'" in done.err
        assert "pipx install 'klavis-sandbox[emulator]'" in done.err
        assert "workflows.EmulatorProcess()" in done.err


def test_the_full_venv_has_every_requirement_of_its_extras(full: Venv, tmp_path: Path) -> None:
    program = textwrap.dedent(
        """
        import importlib.metadata as m
        from packaging.requirements import Requirement
        from packaging.version import Version
        unmet = []
        for text in m.requires("klavis-sandbox"):
            req = Requirement(text)
            for extra in ("", "emulator", "mcp"):
                if extra:
                    wanted = req.marker is not None and req.marker.evaluate({"extra": extra})
                else:
                    wanted = req.marker is None
                if wanted:
                    try:
                        ok = Version(m.version(req.name)) in req.specifier
                    except m.PackageNotFoundError:
                        ok = False
                    if not ok:
                        unmet.append(text)
        print(unmet)
        """
    )
    done = full.run("python", "-c", program, cwd=tmp_path)
    assert (done.code, done.err, done.out) == (0, "", "[]\n")


USER_PROGRAM = textwrap.dedent(
    """
    from klavis_emulator import EmulatorConfig, EmulatorServer
    from klavis_sandbox_client import AuthenticatedClient
    from workflows import KlavisError, LocalSandbox, Snapshot


    def sizes(snapshot: Snapshot) -> dict[str, int]:
        return {entry.path: entry.size for entry in snapshot.manifest()}


    def main() -> None:
        with EmulatorServer(EmulatorConfig(host_mcp=False)) as server:
            client = AuthenticatedClient(base_url=server.base_url, token="k")
            try:
                with LocalSandbox.acquire(["git"], base_url=server.base_url, api_key="k") as sb:
                    written: int = sb.seed({"a.txt": "hi"})
                    print(written, sizes(sb.dump()), client)
            except KlavisError as exc:
                print(exc)
    """
)


def test_mypy_strict_checks_a_users_program_against_the_wheel(full: Venv, tmp_path: Path) -> None:
    """One run over a right program and the same with a wrong type: only the wrong one errs
    (without ``py.typed``, strict mypy reports the packages as missing stubs in both)."""
    (tmp_path / "good.py").write_text(USER_PROGRAM)
    (tmp_path / "bad.py").write_text(USER_PROGRAM.replace("written: int =", "written: str ="))
    line = next(n for n, x in enumerate(USER_PROGRAM.splitlines(), 1) if "written: int =" in x)
    checked = subprocess.run(
        [
            *(sys.executable, "-m", "mypy", "--strict", "--config-file", "/dev/null"),
            *("--python-executable", full.python, "--cache-dir", str(tmp_path / "cache")),
            *("--no-pretty", "--no-error-summary", "good.py", "bad.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "MYPYPATH"},
    )
    assert (checked.returncode, checked.stdout.splitlines()) == (
        1,
        [
            f'bad.py:{line}: error: Incompatible types in assignment (expression has type "int", '
            'variable has type "str")  [assignment]'
        ],
    ), checked.stdout + checked.stderr
