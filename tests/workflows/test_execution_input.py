"""What goes into an execution archive, without a network: requirements files read as pip reads
them, extra files and folders, refusals that name the right argument, and the exit status read
from the end of the emulator's log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workflows import InvalidInputError
from workflows._execution import ExitScan
from workflows._execution_input import (
    directory_execution_files,
    execution_files,
    read_requirements_file,
    requirement_lines,
)
from workflows._seed import SourceFile


def _names(entries: list[SourceFile]) -> list[str]:
    return [e.name for e in entries]


def test_a_requirements_file_is_read_as_pip_reads_it(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "base.txt").write_text(
        "\ufeff# shared pins\n--index-url https://example.org/simple\nhttpx==0.28.1 \\\n"
        "    --hash=sha256:abc  # joined\n"
    )
    (tmp_path / "shared" / "more.txt").write_text("rich\n")
    (tmp_path / "job" / "requirements.txt").write_text(
        "-r ../shared/base.txt\n\n--requirement=../shared/more.txt\n"
        "pkg @ https://example.org/pkg.whl#egg=pkg\npandas>=2 ; python_version >= '3.10'\n"
    )
    os.chdir(tmp_path / "shared")  # nested files are relative to the file, not the cwd
    lines = read_requirements_file(tmp_path / "job" / "requirements.txt")
    assert lines == [
        "--index-url https://example.org/simple",
        "httpx==0.28.1     --hash=sha256:abc",
        "rich",
        "pkg @ https://example.org/pkg.whl#egg=pkg",
        "pandas>=2 ; python_version >= '3.10'",
    ]
    entries = execution_files("print(1)", requirements=tmp_path / "job" / "requirements.txt")
    by_name = {e.name: e for e in entries}
    assert by_name["requirements.txt"].data == "".join(f"{line}\n" for line in lines).encode()


def test_lines_given_as_a_list_resolve_r_from_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("-rinner.txt\n")
    (tmp_path / "inner.txt").write_text("attrs\n")
    assert requirement_lines(["httpx", "-r r.txt", "# a comment", " "]) == ["httpx", "attrs"]
    assert requirement_lines(()) == []
    assert _names(execution_files("print(1)")) == ["main.py"]  # no empty requirements.txt


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"r.txt": "-c constraints.txt\n"}, r"r\.txt line 1 .*constraint files \(-c\)"),
        ({"r.txt": "--constraint=c.txt\n"}, "constraint files"),
        ({"r.txt": "-r https://example.org/r.txt\n"}, "named by URL is not fetched"),
        ({"r.txt": "-r a.txt\n", "a.txt": "-r r.txt\n"}, r"includes itself \(an -r loop\)"),
        ({"r.txt": "-r\n"}, "-r needs a file name"),
        ({"r.txt": "-r missing.txt\n"}, r"-r missing\.txt: .*missing\.txt does not exist"),
        ({"r.txt": b"\xff\xfe"}, "is not UTF-8"),
    ],
)
def test_requirements_files_pip_would_read_differently_are_refused(
    tmp_path: Path, files: dict[str, str | bytes], message: str
) -> None:
    for name, content in files.items():
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(InvalidInputError, match=message):
        execution_files("print(1)", requirements=tmp_path / "r.txt")


@pytest.mark.parametrize(
    ("requirements", "message"),
    [
        ("requirements.txt", r"pass requirements=Path\('requirements.txt'\)"),
        ("httpx", r"requirements=\['httpx'\] \(or a Path to a requirements file\)"),
        ([Path("r.txt")], r"pass the path itself, requirements=Path\('r.txt'\)"),
        (Path("nowhere.txt"), r"requirements=: nowhere\.txt does not exist"),
        (3, "not int"),
    ],
)
def test_requirements_refusals_name_the_argument(requirements: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        execution_files("print(1)", requirements=requirements)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"requirements.txt": "httpx\n"},
            r"'requirements.txt': pass requirements= \(a list of lines or a requirements file "
            r"path\)",
        ),
        ({"./main.py": "x"}, r"'./main.py': the script is execute\(\)'s first argument, main"),
        ({"a": "x", "a/b.csv": Path("x.csv")}, "'a' is a file in the execution archive, but"),
        ({"x.csv": "x", "./x.csv": Path("x.csv")}, "two files in the execution archive are nam"),
        ({"data": Path("no-such-folder")}, r"files\['data'\] = 'no-such-folder' does not exist"),
        ([Path("x.csv")], r"files must be a mapping .* not a list"),
        ({".": Path(".")}, r"names the archive's top folder: .*execute_directory\(folder\)"),
        ({"../up.txt": "x"}, r"^files key '../up.txt'"),
        ({"n.txt": 3}, r"^files value for 'n.txt' is a int"),
    ],
)
def test_files_refusals_name_the_argument(files: object, message: str) -> None:
    Path("x.csv").write_text("a,b\n")  # in this test's own folder
    with pytest.raises(InvalidInputError, match=message):
        execution_files("print(1)", files=files)  # type: ignore[arg-type]


def test_files_take_paths_to_files_and_folders(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "util.py").write_text("X = 1\n")
    (tmp_path / "lib" / "debug.log").write_text("noise\n")
    (tmp_path / "lib" / ".gitignore").write_text("*.log\n")
    (tmp_path / "data.csv").write_text("a,b\n")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "run.sh").chmod(0o755)
    entries = execution_files(
        "print(1)",
        files={
            "lib": tmp_path / "lib",
            "in/data.csv": tmp_path / "data.csv",
            "run.sh": tmp_path / "run.sh",
            "note.txt": "text",
        },
    )
    assert _names(entries) == [
        "in/data.csv",
        "lib/.gitignore",
        "lib/util.py",
        "main.py",
        "note.txt",
        "run.sh",
    ]
    by_name = {e.name: e for e in entries}
    assert by_name["run.sh"].mode == 0o755
    assert by_name["in/data.csv"].path == tmp_path / "data.csv"


def test_a_folder_is_run_by_its_main_py(tmp_path: Path) -> None:
    job = tmp_path / "job"
    (job / ".git").mkdir(parents=True)
    (job / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (job / "main.py").write_text("print(1)\n")
    (job / "out.log").write_text("old\n")
    (job / ".gitignore").write_text("*.log\n")
    (job / "requirements.txt").write_text("httpx\n")
    entries = directory_execution_files(job, files={"extra.txt": "x"}, ignore=["*.tmp"])
    assert _names(entries) == [".gitignore", "extra.txt", "main.py", "requirements.txt"]
    with pytest.raises(InvalidInputError, match=r"has a requirements.txt already, and requirem"):
        directory_execution_files(job, requirements=["attrs"])
    with pytest.raises(InvalidInputError, match=r"is a folder: run its main.py .*execute_direc"):
        execution_files(job)
    (job / "main.py").unlink()
    with pytest.raises(InvalidInputError, match=r"has no main\.py at its top level"):
        directory_execution_files(job)
    with pytest.raises(InvalidInputError, match="'nowhere' does not exist"):
        directory_execution_files("nowhere")


EXITED = "[emulator] main.py exited with status {}.\n"


def _scanned(*pieces: str) -> int | None:
    scan = ExitScan()
    cursor = 0
    for piece in pieces:
        end = cursor + len(piece.encode())
        scan.feed(cursor, piece, end)
        cursor = end
    scan.finish()
    return scan.code


def test_the_exit_status_is_the_emulators_last_line() -> None:
    assert _scanned("hi\n", EXITED.format(3)) == 3
    assert _scanned("hi\n[emula", "tor] main.py exited with status 0.\n") == 0  # split
    assert _scanned(EXITED.format(0)) == 0  # the whole log
    assert _scanned("x\n[emulator] main.py was killed by signal 9.\n") == -9
    assert _scanned("x" * 5000 + "\n" + EXITED.format(4)) == 4  # after a long log
    # not the last line, not a line of its own, or another ending: unknown
    assert _scanned(EXITED.format(7), "more output\n") is None
    assert _scanned("partial" + EXITED.format(7)) is None
    assert _scanned("x" * 5000 + EXITED.format(7)) is None
    assert _scanned("[emulator] pip failed with status 1; main.py was not run.\n") is None
    assert _scanned("") is None


def test_the_exit_scan_takes_only_what_follows_what_it_read() -> None:
    scan = ExitScan()
    scan.feed(0, "a\n", 2)
    scan.feed(0, "a\n", 2)  # a second reader from 0: already seen
    scan.feed(5, EXITED.format(1), 40)  # a gap: ignored
    scan.feed(2, EXITED.format(2), 2 + len(EXITED.format(2)))
    scan.finish()
    scan.feed(0, EXITED.format(9), 100)  # finished: nothing changes it
    assert (scan.code, scan.done) == (2, True)
