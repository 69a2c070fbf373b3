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
    done = bare.run("klavis-sandbox", "demo", cwd=tmp_path)
    assert (done.code, done.out) == (1, "")
    assert "needs the emulator extra: pip install 'klavis-sandbox[emulator]'" in done.err
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
