"""The check of an execution's ``requirements.txt``: pip installs wheels only, builds nothing.

The install step has network access, and the network includes the host's loopback, where
the emulator's control routes answer clients without a control token. pip runs a package's
own code when it builds one (an sdist, a local folder, an editable or VCS requirement), so:

* pip runs with ``--only-binary=:all:`` (installing a wheel runs no code) and reads the copy
  :func:`check_requirements` writes (absolute wheel paths, one spelling per option), never
  the tenant's file: what pip reads is what was checked;
* the check is an allow-list: names from an index, wheel files in the archive, wheel URLs,
  and the index, find-links, hash and pre-release options. Anything else (local folders and
  source archives, ``-e``, VCS and other URLs, ``--no-binary``, build options, nested
  ``-r``/``-c`` files, ``${VARIABLES}``) is refused, naming the line and the reason.

pip only sends ``GET``/``HEAD``, so an index URL pointing at the emulator reads but changes
nothing. The rule is the same confined or not. A project that exists only as an sdist does
not install: build its wheel elsewhere, put the ``.whl`` in the archive and list its path
(``./wheels/pkg-1.0-py3-none-any.whl``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from klavis_archive import pip_logical_lines

__all__ = ["WHEELS_ONLY_HINT", "RequirementsRefused", "check_requirements"]

_MAX_REQUIREMENTS_BYTES: Final = 1024 * 1024
WHEELS_ONLY_HINT: Final = (
    "The emulator installs requirements from wheels only and runs no package's build code "
    "(a build would run with network access, and the emulator's control routes answer on "
    "loopback): name packages from an index (pip picks their wheels), or build the wheel "
    "elsewhere (pip wheel), put the .whl in the archive and list its path, e.g. "
    "./wheels/pkg-1.0-py3-none-any.whl."
)
_NAME_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~*+;()'\" ]*")
_LEADING_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ARCHIVE_SUFFIXES: Final = (
    ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz",
    ".tar.lz", ".tar.lzma",
)  # fmt: skip
_URL = re.compile(r"https?://[A-Za-z0-9._~:/?&=%+@!,;-]+")
_REL_PATH = re.compile(r"[A-Za-z0-9_.+-][A-Za-z0-9_.+/-]*")
_HOST = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?")
_HASH = re.compile(r"[a-z0-9]+:[0-9a-fA-F]+")
_FLAGS: Final = frozenset({"--no-index", "--pre", "--prefer-binary", "--require-hashes"})
_VALUED: Final = {
    "-i": "--index-url",
    "--index-url": "--index-url",
    "--extra-index-url": "--extra-index-url",
    "-f": "--find-links",
    "--find-links": "--find-links",
    "--trusted-host": "--trusted-host",
    "--only-binary": "--only-binary",
    "--hash": "--hash",
}
_REFUSED_OPTIONS: Final = {
    ("-e", "--editable"): "an editable install builds the project (its own code)",
    ("--no-binary",): "--no-binary asks pip to build from source",
    ("-r", "--requirement", "-c", "--constraint"): (
        "nested requirement and constraint files are not read: list every requirement in "
        "requirements.txt itself"
    ),
    ("-C", "--config-settings", "--global-option", "--install-option", "--build-option"): (
        "build options only matter when pip builds a package"
    ),
}


# An allow-list, because --only-binary=:all: alone is not enough: measured with pip 26.3, it
# still built a local folder, a local .tar.gz and a --no-binary :all: line of the file.


class RequirementsRefused(ValueError):
    """A ``requirements.txt`` line the emulator does not hand to pip (the message says which
    line, why, and what to do instead)."""


def _refused(number: int, shown: str, reason: str) -> RequirementsRefused:
    line = shown if len(shown) <= 120 else shown[:120] + "..."
    return RequirementsRefused(
        f"requirements.txt line {number} ({line!r}) is refused: {reason}. {WHEELS_ONLY_HINT}"
    )


def _inside(workdir: Path, relative: str, *, want_dir: bool) -> str | None:
    """``relative`` as a path below ``workdir`` (``a/b``), or ``None`` when it leaves it,
    does not exist, or is not the wanted kind."""
    if relative.startswith("/") or not _REL_PATH.fullmatch(relative):
        return None
    root = workdir.resolve()
    target = (workdir / relative).resolve()
    if target != root and root not in target.parents:
        return None
    if not (target.is_dir() if want_dir else target.is_file()):
        return None
    return target.relative_to(root).as_posix()


def _option_value(
    number: int, line: str, name: str, value: str, workdir: Path, shown_workdir: str
) -> str:
    """The checked, canonical value of an accepted option (raises when it is not safe)."""
    if name in ("--index-url", "--extra-index-url"):
        if _URL.fullmatch(value):
            return value
        raise _refused(number, line, f"{name} takes an http(s) URL without spaces or quotes")
    if name == "--find-links":
        if _URL.fullmatch(value):
            return value
        inside = _inside(workdir, value, want_dir=True)
        if inside is None and value.endswith(".whl"):
            inside = _inside(workdir, value, want_dir=False)
        if inside is not None:
            return f"{shown_workdir}/{inside}" if inside != "." else shown_workdir
        raise _refused(
            number, line, "--find-links takes an http(s) URL or a folder inside the archive"
        )
    if name == "--trusted-host":
        if _HOST.fullmatch(value):
            return value
        raise _refused(number, line, "--trusted-host takes a host name (and a port)")
    if name == "--hash":
        if _HASH.fullmatch(value):
            return value
        raise _refused(number, line, "--hash takes algorithm:hexdigest")
    return value


def _options(
    number: int, line: str, tokens: list[str], workdir: Path, shown_workdir: str
) -> list[tuple[str, str | None]]:
    """The options in ``tokens`` as ``(name, value)`` pairs (``None`` for flags)."""
    found: list[tuple[str, str | None]] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token in _FLAGS:
            found.append((token, None))
            continue
        name, has_value, value = token.partition("=")
        if not has_value and name not in _VALUED and name[:2] in ("-i", "-f") and len(name) > 2:
            name, value, has_value = name[:2], name[2:], "="  # -iURL, -fPATH
        if name in _VALUED:
            if not has_value:
                if index >= len(tokens):
                    raise _refused(number, line, f"{name} needs a value")
                value = tokens[index]
                index += 1
            canonical = _VALUED[name]
            found.append(
                (canonical, _option_value(number, line, canonical, value, workdir, shown_workdir))
            )
            continue
        for names, reason in _REFUSED_OPTIONS.items():
            if name in names:
                raise _refused(number, line, reason)
        raise _refused(number, line, f"the option {name[:40]!r} is not accepted here")
    return found


def _requirement(number: int, line: str, text: str, workdir: Path, shown_workdir: str) -> str:
    """The checked form of a requirement (a name from an index, or a wheel)."""
    if text.endswith(".whl") and " " not in text:
        if _URL.fullmatch(text):
            return text
        inside = _inside(workdir, text, want_dir=False)
        if inside is not None:
            return f"{shown_workdir}/{inside}"
        raise _refused(number, line, "this wheel is not a file inside the archive")
    if "$" in text:
        raise _refused(number, line, "${VARIABLES} are not expanded")
    if "@" in text or ":" in text or "/" in text or "\\" in text or text.startswith("."):
        raise _refused(
            number,
            line,
            "a local folder, a source archive, a VCS or other URL is built by pip (its "
            "own code runs); only wheel files (.whl) and names from an index are installed",
        )
    leading = _LEADING_NAME.match(text)
    if leading is not None and leading.group().lower().endswith(_ARCHIVE_SUFFIXES):
        raise _refused(number, line, "a source archive is built by pip (its own code runs)")
    if not _NAME_CHARS.fullmatch(text):
        raise _refused(number, line, "this is not a requirement pip and the emulator agree on")
    return text


def check_requirements(data: bytes, workdir: Path, shown_workdir: str) -> str:
    """Check ``requirements.txt`` (its bytes) and return the copy pip will read.

    Accepted, line by line: names from an index with extras, versions and markers
    (``--hash=...`` after them), wheel files inside ``workdir`` (written as absolute paths
    below ``shown_workdir``, where pip sees ``workdir``), ``http(s)`` URLs of wheels, and the
    options ``--index-url``/``-i``, ``--extra-index-url``, ``--find-links``/``-f`` (a URL or a
    folder inside the archive), ``--trusted-host``, ``--no-index``, ``--pre``,
    ``--prefer-binary``, ``--require-hashes``; ``--only-binary`` is dropped (the emulator
    passes ``--only-binary=:all:`` itself). Anything else raises.

    Raises:
        RequirementsRefused: the first line that is not accepted (the message names it).
    """
    # pip reads this copy, never the tenant's file. Rejected: checking the file and handing
    # pip the original (pip's decoding, line joining, ${VAR} expansion and option
    # abbreviations, --edit for --editable, would be a second parser to keep equal).
    if len(data) > _MAX_REQUIREMENTS_BYTES:
        raise RequirementsRefused(
            f"requirements.txt is larger than {_MAX_REQUIREMENTS_BYTES:,} bytes: it is refused."
        )
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise RequirementsRefused(
            "requirements.txt is not UTF-8 text: it is refused (write it in UTF-8)."
        ) from None
    checked: list[str] = []
    for number, line in pip_logical_lines(text):
        if "${" in line:
            raise _refused(number, line, "${VARIABLES} are not expanded")
        tokens = line.split()
        split = next((i for i, token in enumerate(tokens) if token.startswith("-")), len(tokens))
        options = _options(number, line, tokens[split:], workdir, shown_workdir)
        if split:
            requirement = _requirement(
                number, line, " ".join(tokens[:split]), workdir, shown_workdir
            )
            if any(name != "--hash" for name, _ in options):
                raise _refused(number, line, "only --hash may follow a requirement")
            checked.append(" ".join([requirement, *(f"--hash={v}" for _, v in options)]))
            continue
        for name, value in options:
            if name == "--hash":
                raise _refused(number, line, "--hash must follow a requirement")
            if name == "--only-binary":
                continue  # the emulator passes --only-binary=:all: itself
            checked.append(name if value is None else f"{name}={value}")
    return "".join(f"{line}\n" for line in checked)
