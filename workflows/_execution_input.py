"""What goes into an execution's archive, checked and laid out before anything is sent.

The service runs ``main.py`` from a tar.gz that may also hold ``requirements.txt`` (installed
with pip first) and any other files (beside ``main.py``, in its working directory). Three ways
in, for the habits people bring from pip, E2B and Modal:

* the script: its text, or a ``Path`` to a file (uploaded as ``main.py``), or a folder that
  holds ``main.py`` (:func:`directory_execution_files`: everything in it is uploaded, with
  ``.gitignore`` honoured as seeding a folder does);
* ``requirements=``: a list of requirement lines, or the path of a requirements file, read as
  pip reads one (:func:`read_requirements_file`: nested ``-r`` files are followed, relative to
  the file that names them; ``-c`` constraint files are refused, because the archive carries a
  single ``requirements.txt``);
* ``files=``: ``{"name in the archive": text | bytes | Path}``, where a ``Path`` is a file or a
  folder on disk.

Every refusal names the argument to use instead (``main.py`` in ``files=`` names the script
argument, ``requirements.txt`` names ``requirements=``), and comes before any request.

The requirements reader has bounds, each refusal naming the file and the limit: regular files
only (a FIFO would block the read for ever, ``/dev/zero`` never ends: the file is ``stat``-ed
before it is opened, opened with ``O_NONBLOCK`` and ``fstat``-ed before a byte is read);
8 MiB read in all for one ``requirements=`` (checked against the size before reading, and the
read stops there if the file grew: a 1 GiB file used to be read whole, then refused, and
``/dev/zero`` ended in a ``MemoryError``); 1,000 files read, a file named twice by ``-r``
counting twice (pip reads it twice, and its lines are repeated: reading it once would still
repeat them, and the cap is on what the reader does; 8 files of 706 bytes naming the next
one 8 times each meant 10**7 reads); 20 files deep. Links are followed, as pip follows them:
the files are the user's own, on the user's machine (no ``O_NOFOLLOW``). pip's comment rule
(``(^|\\s+)#.*$``) is applied without its regular expression, which backtracks over every run
of spaces: a 100 KB line of spaces took over 20 s.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from klavis_archive import pip_logical_lines

from ._errors import InvalidInputError, InvalidSeedPathError
from ._paths import normalize_seed_key
from ._seed import DEFAULT_MAX_FILE_SIZE, OnDisk, SourceFile, plan_directory, plan_mapping
from ._seed._entries import EXEC_MODE, FILE_MODE

__all__ = [
    "ExecutionFiles",
    "Requirements",
    "directory_execution_files",
    "execution_files",
    "read_requirements_file",
    "requirement_lines",
]

#: What ``requirements=`` takes: requirement lines, or the path of a requirements file.
Requirements = Sequence[str] | os.PathLike[str]
#: What ``files=`` takes: archive name -> text, bytes, or a ``Path`` to a file or a folder.
ExecutionFiles = Mapping[str, str | bytes | os.PathLike[str]]

_MAIN = "main.py"
_REQUIREMENTS = "requirements.txt"
_REQUIREMENTS_HINT = "pass requirements= (a list of lines or a requirements file path)"
_MAIN_HINT = (
    "the script is execute()'s first argument, main (its text or a Path to it); to run a "
    "folder's main.py with everything beside it, use execute_directory(folder)"
)
_MAX_DEPTH = 20
_MAX_FILES = 1000
_MAX_BYTES = 8 * 1024 * 1024
_CHUNK = 1024 * 1024
_O_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)
_O_BINARY: int = getattr(os, "O_BINARY", 0)
_SPECIAL_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}
"""What a file that is neither regular nor a folder is, in words, by its type."""
# Written here rather than taken from a library: pip-requirements-parser (last release 2022)
# vendors pip's whole parser to answer a question of 40 lines (which lines, which files), and
# requirements-parser drops the options (--index-url, --hash) a requirements file may carry.


@dataclasses.dataclass
class _Budget:
    """What one ``requirements=`` has read so far: files (repeats included) and bytes; and
    ``what`` names it (``requirements=``, ``-r FILE``) at the start of a nested file's refusal
    ("" when lines named the file: they are named ``requirements=`` themselves)."""

    what: str
    files: int = 0
    bytes: int = 0


def _option_value(line: str, short: str, long: str) -> str | None:
    """The value when ``line`` is the option ``short``/``long`` (``-r x``, ``-rx``,
    ``--requirement x``, ``--requirement=x``), else None."""
    if line.startswith(long) and line[len(long) : len(long) + 1] in ("", "=", " ", "\t"):
        return line[len(long) :].lstrip(" \t=").strip()
    if line.startswith(short) and not line.startswith("--"):
        return line[len(short) :].strip()
    return None


def _flatten(
    text: str, base: Path, shown: str, seen: tuple[Path, ...], budget: _Budget
) -> list[str]:
    """The requirement lines of ``text`` (read from ``shown``), nested ``-r`` files inlined
    (relative to ``base``, the folder of the file that names them)."""
    lines: list[str] = []
    for number, line in pip_logical_lines(text):
        where = f"{budget.what}: " if budget.what else ""
        where += f"{shown} line {number} ({line[:80]!r})"
        if _option_value(line, "-c", "--constraint") is not None:
            raise InvalidInputError(
                f"{where}: constraint files (-c) are not supported: an execution carries one "
                "requirements.txt, so pin the versions in the requirements themselves"
            )
        include = _option_value(line, "-r", "--requirement")
        if include is None:
            lines.append(line)
            continue
        if not include:
            raise InvalidInputError(f"{where}: -r needs a file name")
        if "://" in include:
            raise InvalidInputError(
                f"{where}: a requirements file named by URL is not fetched; download it and "
                "name the local file"
            )
        nested = base / include  # pip: relative to the file that names it
        lines.extend(_read(nested, seen, f"{where}: -r {include}", budget))
    return lines


def _check(st: os.stat_result, shown: str, named_by: str, budget: _Budget) -> None:
    """Refuse what is not a regular file, or what would pass the byte limit."""
    if stat.S_ISDIR(st.st_mode):
        raise InvalidInputError(f"{named_by}: {shown} is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = _SPECIAL_KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise InvalidInputError(
            f"{named_by}: {shown} is {kind}: requirements are read from regular files only"
        )
    if st.st_size > _MAX_BYTES:
        raise InvalidInputError(
            f"{named_by}: {shown} is {st.st_size:,} bytes, over the limit of {_MAX_BYTES:,} "
            "bytes (8 MiB) of requirements files"
        )
    if budget.bytes + st.st_size > _MAX_BYTES:
        raise _over_total(shown, named_by, budget.bytes + st.st_size)


def _over_total(shown: str, named_by: str, total: int) -> InvalidInputError:
    return InvalidInputError(
        f"{named_by}: {shown} brings the requirements files read to {total:,} bytes, over the "
        f"limit of {_MAX_BYTES:,} bytes (8 MiB) for one requirements= (a file named twice by -r "
        "counts twice)"
    )


def _read_bytes(path: Path, shown: str, named_by: str, budget: _Budget) -> bytes:
    """The bytes of the regular file ``path``, read within the budget (see the module docs)."""
    _check(os.stat(path), shown, named_by, budget)  # before opening: no device is opened
    fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_BINARY)
    try:
        _check(os.fstat(fd), shown, named_by, budget)  # what was opened (it may have changed)
        room = _MAX_BYTES - budget.bytes
        chunks: list[bytes] = []
        got = 0
        while chunk := os.read(fd, min(_CHUNK, room + 1 - got)):
            chunks.append(chunk)
            got += len(chunk)
            if got > room:  # it grew since fstat
                raise _over_total(shown, named_by, budget.bytes + got)
    finally:
        os.close(fd)
    budget.bytes += got
    return b"".join(chunks)


def _read(path: Path, seen: tuple[Path, ...], named_by: str, budget: _Budget) -> list[str]:
    shown = os.fspath(path)
    if len(seen) >= _MAX_DEPTH:
        raise InvalidInputError(f"{named_by}: requirements files nest deeper than {_MAX_DEPTH}")
    budget.files += 1
    if budget.files > _MAX_FILES:
        raise InvalidInputError(
            f"{named_by}: {shown} would be requirements file number {budget.files:,}: at most "
            f"{_MAX_FILES:,} are read for one requirements= (a file named twice by -r is read, "
            "and counted, twice)"
        )
    try:
        resolved = path.resolve()
        if resolved in seen:
            raise InvalidInputError(f"{named_by}: {shown} includes itself (an -r loop)")
        data = _read_bytes(path, shown, named_by, budget)
    except IsADirectoryError:
        raise InvalidInputError(f"{named_by}: {shown} is a folder, not a file") from None
    except FileNotFoundError:
        raise InvalidInputError(f"{named_by}: {shown} does not exist") from None
    except OSError as exc:
        raise InvalidInputError(f"{named_by}: {shown} cannot be read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{named_by}: {shown} is not UTF-8 text") from None
    return _flatten(text, path.parent, shown, (*seen, resolved), budget)


def read_requirements_file(
    path: str | os.PathLike[str], *, what: str = "requirements="
) -> list[str]:
    """The requirement lines of a requirements file, read as pip reads one.

    Lines ending in ``\\`` are joined, ``#`` comments and blank lines dropped, and every
    ``-r``/``--requirement`` file is read in its place, relative to the file that names it
    (as pip does). Other lines (``--index-url``, ``--hash``, markers, wheel paths) are kept as
    written. Refused, naming the file and line: ``-c``/``--constraint`` (the archive carries
    one ``requirements.txt``), ``-r`` with a URL, a loop of ``-r`` files, a file that is missing
    or not UTF-8 (a nested file's refusal names the file and line that named it). Refused too,
    naming the file and the limit: what is not a regular file (a
    FIFO, a device), more than 8 MiB read in all, more than 1,000 files read (a file named twice
    counts twice), files nested more than 20 deep. Messages start with ``what`` (the argument
    that named the file).

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "base.txt").write_text("httpx==0.28.1  # the client\\n")
    >>> _ = (folder / "requirements.txt").write_text("-r base.txt\\npandas\\n")
    >>> read_requirements_file(folder / "requirements.txt")
    ['httpx==0.28.1', 'pandas']
    """
    return _read(Path(path), (), what, _Budget(what))


def requirement_lines(requirements: object) -> list[str]:
    """The lines of ``requirements=``: a list of lines as given (``-r FILE`` lines read
    relative to the current folder, as pip's command line does), or a requirements file's
    lines (:func:`read_requirements_file`)."""
    if isinstance(requirements, os.PathLike):
        return read_requirements_file(requirements)
    if isinstance(requirements, str | bytes):
        shown = requirements if isinstance(requirements, str) else repr(requirements)
        looks_like_file = isinstance(requirements, str) and (
            requirements.strip().endswith(".txt") or os.path.isfile(requirements)
        )
        if looks_like_file:
            raise InvalidInputError(
                f"requirements={shown!r} is one str: to read a requirements file, pass "
                f"requirements=Path({shown!r}); for packages, a list: requirements=['httpx']"
            )
        raise InvalidInputError(
            f"requirements must be a list of requirement lines, not one str: "
            f"requirements=[{shown!r}] (or a Path to a requirements file)"
        )
    if not isinstance(requirements, Iterable):
        raise InvalidInputError(
            "requirements must be a list of requirement lines or a Path to a requirements "
            f"file, not {type(requirements).__name__}"
        )
    texts: list[str] = []
    for item in requirements:
        if isinstance(item, os.PathLike):
            raise InvalidInputError(
                f"requirements=[Path({os.fspath(item)!r})]: pass the path itself, "
                f"requirements=Path({os.fspath(item)!r}), to read a requirements file"
            )
        texts.append(str(item))
    return _flatten("\n".join(texts), Path.cwd(), "requirements=", (), _Budget(""))


def _from_disk(key: str, name: str, path: Path, label: str = "") -> list[SourceFile]:
    """The entries of ``files={key: Path}``: one file, or a folder's planned contents below
    ``name`` (``label``: how messages name the argument, ``files[key] = path`` by default)."""
    label = label or f"files[{key!r}] = {os.fspath(path)!r}"
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InvalidInputError(f"{label} does not exist") from None
    except OSError as exc:
        raise InvalidInputError(f"{label} cannot be read ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        planned = plan_directory(path, gitignore=True)
        return [dataclasses.replace(e, name=f"{name}/{e.name}") for e in planned]
    if not stat.S_ISREG(st.st_mode):
        raise InvalidInputError(f"{label} is not a file or folder")
    if st.st_size > DEFAULT_MAX_FILE_SIZE:
        raise InvalidInputError(
            f"{label} is {st.st_size:,} bytes, over the "
            f"{DEFAULT_MAX_FILE_SIZE:,}-byte limit for one file"
        )
    mode = EXEC_MODE if st.st_mode & stat.S_IXUSR else FILE_MODE
    # packed from its real folder, following no link from there (a link the user named is
    # followed now, once), and only while it is still the file stat() saw
    real = os.path.realpath(path)
    folder, base = os.path.split(real)
    disk = OnDisk.planned(folder, os.stat(folder), base, st, os.fspath(path))
    return [SourceFile(name=name, size=st.st_size, mode=mode, disk=disk)]


def _as_files_error(exc: InvalidInputError) -> InvalidInputError:
    """The seeding planner's refusal, worded for ``files=`` (``files key``, not ``seed key``)."""
    message = str(exc).replace("seed key", "files key").replace("seed value", "files value")
    if isinstance(exc, InvalidSeedPathError):
        return InvalidSeedPathError(message, path=exc.path)
    return InvalidInputError(message)


def _extra_files(files: object) -> list[SourceFile]:
    """The entries of ``files=``, each checked, none named ``main.py`` or
    ``requirements.txt``."""
    if files is None:
        return []
    if not isinstance(files, Mapping):
        raise InvalidInputError(
            "files must be a mapping of name in the archive to text, bytes or a Path, not a "
            f"{type(files).__name__} (e.g. files={{'data.csv': Path('data.csv')}})"
        )
    in_memory: dict[str, object] = {}
    entries: list[SourceFile] = []
    for key, value in files.items():
        if isinstance(key, str) and key.strip("/") in ("", "."):
            raise InvalidInputError(
                f"files key {key!r} names the archive's top folder: to send a folder with its "
                "main.py, use execute_directory(folder); to send one beside main.py, name it "
                "(files={'lib': Path('lib')})"
            )
        try:
            name = normalize_seed_key(key)
        except InvalidInputError as exc:  # its message speaks of seeding: say files=
            raise _as_files_error(exc) from None
        if name == _MAIN:
            raise InvalidInputError(f"files must not contain {key!r}: {_MAIN_HINT}")
        if name == _REQUIREMENTS:
            raise InvalidInputError(f"files must not contain {key!r}: {_REQUIREMENTS_HINT}")
        if isinstance(value, os.PathLike):
            entries.extend(_from_disk(key, name, Path(value)))
        else:
            in_memory[key] = value
    try:
        entries.extend(plan_mapping(in_memory))  # type: ignore[arg-type]  # it checks the values
    except InvalidInputError as exc:  # its messages speak of seeding: say files=
        raise _as_files_error(exc) from None
    return entries


def _merged(entries: Sequence[SourceFile]) -> list[SourceFile]:
    """``entries`` sorted by name; two entries of one name, or a file where another needs a
    folder, raise :class:`InvalidInputError`."""
    by_name: dict[str, SourceFile] = {}
    for entry in entries:
        if entry.name in by_name:
            raise InvalidInputError(f"two files in the execution archive are named {entry.name!r}")
        by_name[entry.name] = entry
    for name in by_name:
        parent = name
        while "/" in parent:
            parent = parent.rsplit("/", 1)[0]
            if parent in by_name and not by_name[parent].is_dir:
                raise InvalidInputError(
                    f"{parent!r} is a file in the execution archive, but {name!r} needs it to "
                    "be a folder"
                )
    return sorted(by_name.values(), key=lambda e: e.name)


def _requirements_entry(requirements: object) -> list[SourceFile]:
    lines = requirement_lines(requirements)
    if not lines:
        return []
    return plan_mapping({_REQUIREMENTS: "".join(f"{line}\n" for line in lines)})


def execution_files(
    main: str | os.PathLike[str],
    *,
    requirements: Requirements = (),
    files: ExecutionFiles | None = None,
) -> list[SourceFile]:
    """Check and lay out the execution archive: ``main.py``, ``requirements.txt``, extra files.

    ``main`` is the script's text, or a :class:`pathlib.Path` (any ``os.PathLike``) to a file.
    """
    if isinstance(main, os.PathLike):
        path = Path(main)
        if path.is_dir():
            raise InvalidInputError(
                f"main {os.fspath(path)!r} is a folder: run its main.py with everything beside "
                f"it with execute_directory(Path({os.fspath(path)!r}))"
            )
        # packed from disk like files= paths (never read whole into memory: a 64 GiB sparse
        # main.py ended in a MemoryError), within the one-file limit, a FIFO refused unopened
        shown = f"main script {os.fspath(path)!r}"
        if not path.is_file():
            raise InvalidInputError(f"{shown} does not exist or is not a file")
        main_entries = _from_disk("main", _MAIN, path, shown)
        entries = [*main_entries, *_requirements_entry(requirements)]
        return _merged([*entries, *_extra_files(files)])
    if isinstance(main, str):
        stripped = main.strip()
        if not stripped:
            raise InvalidInputError("main is empty: pass the script's text or a Path to it")
        if "\n" not in stripped and stripped.endswith(".py") and Path(stripped).is_file():
            raise InvalidInputError(
                f"main looks like a file name; pass Path({stripped!r}) to run that file "
                "(a str is taken as the script's text)"
            )
        source = main
    else:
        raise InvalidInputError(
            f"main must be the script's text (str) or a Path, got {type(main).__name__}"
        )
    entries = [*plan_mapping({_MAIN: source}), *_requirements_entry(requirements)]
    return _merged([*entries, *_extra_files(files)])


def directory_execution_files(
    folder: str | os.PathLike[str],
    *,
    requirements: Requirements = (),
    files: ExecutionFiles | None = None,
    ignore: Sequence[str] | str = (),
    gitignore: bool = True,
) -> list[SourceFile]:
    """Check and lay out the archive of a folder holding ``main.py``: everything in it, with
    ``.gitignore``/``.sandboxignore`` files and ``ignore=`` patterns honoured as
    :meth:`~workflows.LocalSandbox.seed_directory` honours them, and ``.git`` folders left out.
    """
    shown = os.fspath(folder)
    if not os.path.isdir(folder):
        what = "does not exist" if not os.path.exists(folder) else "is not a folder"
        raise InvalidInputError(f"execute_directory: {shown!r} {what}")
    patterns = [ignore] if isinstance(ignore, str) else list(ignore)
    planned = plan_directory(folder, ignore=[".git/", *patterns], gitignore=gitignore)
    names = {entry.name: entry for entry in planned}
    main = names.get(_MAIN)
    if main is None or main.path is None:
        raise InvalidInputError(
            f"{shown!r} has no main.py at its top level (or it is ignored, or a link): the "
            "service runs main.py; to run another script, use execute(Path(script), files=...)"
        )
    extra = _requirements_entry(requirements)
    if extra and _REQUIREMENTS in names:
        raise InvalidInputError(
            f"{shown!r} has a requirements.txt already, and requirements= was given too: drop "
            "one (or leave the folder's out with ignore=['requirements.txt'])"
        )
    return _merged([*planned, *extra, *_extra_files(files)])
