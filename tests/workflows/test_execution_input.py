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


# --- the reader's bounds: each refusal names the file and the limit --------------------------
# A regression here hangs (a FIFO) or runs for minutes (a quadratic comment rule, 10**7 reads):
# the timeout makes it a failure. Each case passes in well under a second.
bounded = pytest.mark.timeout(60)
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="the platform has no FIFOs")


@bounded
@needs_fifo
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "r.txt"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInputError) as refused:
        execution_files("print(1)", requirements=fifo)
    assert str(refused.value) == (
        f"requirements=: {fifo} is a FIFO (named pipe): requirements are read from regular "
        "files only"
    )
    (tmp_path / "top.txt").write_text("httpx\n-r r.txt\n")
    with pytest.raises(InvalidInputError) as refused:
        read_requirements_file(tmp_path / "top.txt")
    assert str(refused.value) == (
        f"requirements=: {tmp_path / 'top.txt'} line 2 ('-r r.txt'): -r r.txt: {fifo} is a FIFO "
        "(named pipe): requirements are read from regular files only"
    )


@bounded
@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="the platform has no /dev/zero")
def test_a_device_is_refused_before_it_is_read() -> None:
    with pytest.raises(InvalidInputError) as refused:
        read_requirements_file(Path("/dev/zero"), what="-r /dev/zero")
    assert str(refused.value) == (
        "-r /dev/zero: /dev/zero is a character device: requirements are read from regular "
        "files only"
    )


@bounded
def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as sparse:
        sparse.truncate(64 * 1024**3)  # 64 GiB of nothing on disk: reading it would fail
    with pytest.raises(InvalidInputError) as refused:
        execution_files("print(1)", requirements=huge)
    assert str(refused.value) == (
        f"requirements=: {huge} is 68,719,476,736 bytes, over the limit of 8,388,608 bytes "
        "(8 MiB) of requirements files"
    )


def test_the_size_limit_is_for_every_file_read_together(tmp_path: Path) -> None:
    comments = "# a pin explained at length\n" * (5 * 1024 * 1024 // 28)  # 5 MiB, no lines
    (tmp_path / "a.txt").write_text(comments)
    top = "-r a.txt\nattrs\n-r a.txt\n"
    (tmp_path / "top.txt").write_text(top)
    total = len(top) + 2 * len(comments)  # a.txt twice: 10,485,744 bytes
    with pytest.raises(InvalidInputError) as refused:
        read_requirements_file(tmp_path / "top.txt")
    assert str(refused.value) == (
        f"requirements=: {tmp_path / 'top.txt'} line 3 ('-r a.txt'): -r a.txt: "
        f"{tmp_path / 'a.txt'} brings the requirements files read to {total:,} bytes, over "
        "the limit of 8,388,608 bytes (8 MiB) for one requirements= (a file named twice by -r "
        "counts twice)"
    )
    (tmp_path / "a.txt").write_text("httpx\n")
    assert read_requirements_file(tmp_path / "top.txt") == ["httpx", "attrs", "httpx"]  # as pip


@bounded
def test_a_fan_out_of_r_files_stops_at_the_file_limit(tmp_path: Path) -> None:
    # 8 files of 130 bytes, each naming the next 10 times: 11 million reads, each file once
    # on any one chain (no loop, 8 deep)
    for level in range(7):
        (tmp_path / f"f{level}.txt").write_text(f"-r f{level + 1}.txt\n" * 10)
    (tmp_path / "f7.txt").write_text("attrs\n")
    with pytest.raises(
        InvalidInputError, match=r"f\d\.txt would be requirements file number "
    ) as e:
        execution_files("print(1)", requirements=tmp_path / "f0.txt")
    assert str(e.value).endswith(
        "would be requirements file number 1,001: at most 1,000 are read for one requirements= "
        "(a file named twice by -r is read, and counted, twice)"
    )
    assert str(e.value).startswith(
        f"requirements=: {tmp_path / 'f6.txt'} line 7 ('-r f7.txt'): -r f7.txt: "
        f"{tmp_path / 'f7.txt'} would be requirements file number 1,001: "
    )


@bounded
def test_a_long_run_of_spaces_costs_one_pass(tmp_path: Path) -> None:
    # pip's comment regex backtracks over each run of spaces: 100 KB took over 20 s, 1 MiB
    # would take over half an hour
    spaces = " " * (1024 * 1024)
    (tmp_path / "r.txt").write_text(f"{spaces}\nhttpx{spaces}# pinned{spaces}\n{spaces}attrs\n")
    assert read_requirements_file(tmp_path / "r.txt") == ["httpx", "attrs"]
    assert requirement_lines([f"rich{spaces}x"]) == [f"rich{spaces}x"]


def test_a_main_script_path_is_packed_from_disk_within_the_file_limit(tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text("print('hi')\n")
    (entry,) = execution_files(script)
    assert (entry.name, entry.size, entry.disk is not None) == ("main.py", 12, True)
    huge = tmp_path / "huge.py"
    with huge.open("wb") as sparse:
        sparse.truncate(64 * 1024**3)  # read whole, it ended in a MemoryError
    with pytest.raises(InvalidInputError) as refused:
        execution_files(huge)
    assert str(refused.value) == (
        f"main script {str(huge)!r} is 68,719,476,736 bytes, over the 268,435,456-byte limit "
        "for one file"
    )
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInputError, match="does not exist or is not a file"):
        execution_files(fifo)  # never opened: a FIFO would wait for a writer
