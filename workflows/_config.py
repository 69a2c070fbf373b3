"""Where the API key and base URL come from: argument > environment > ``.env`` > default.

The key's environment is ``KLAVIS_API_KEY``, or ``KLAVIS_API_KEY_FILE``: the path of a file that
holds it, for machines that get secrets as files (a Kubernetes ``Secret`` volume, Docker
secrets, a Ray cluster's nodes: the path may travel where the key must not, such as a Ray
``runtime_env``). The file is read as the ``.env`` is: refused when another user (but root,
who owns mounted secrets) owns it or may write it, when it is not a regular file, or larger
than :data:`_KEY_FILE_MAX_BYTES`; a file that others may read is used, with one warning.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ._errors import ConfigurationError

__all__ = [
    "check_keywords",
    "API_KEY_ENV",
    "API_KEY_FILE_ENV",
    "BASE_URL_ENV",
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_FILE_SIZE",
    "DEFAULT_MCP_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "ApiKey",
    "Settings",
    "resolve_settings",
]

DEFAULT_BASE_URL = "https://api.klavis.ai"
API_KEY_ENV = "KLAVIS_API_KEY"
API_KEY_FILE_ENV = "KLAVIS_API_KEY_FILE"
BASE_URL_ENV = "KLAVIS_BASE_URL"
DEFAULT_TIMEOUT = 60.0
"""Seconds each API call, and each read of a transfer, may wait. A download (``dump``,
``dump_to``, ``export_artifacts``) has no deadline as a whole unless given ``timeout=``, but is
ended (:class:`~workflows.TransferTimeoutError`) when it receives fewer than 64 KiB within any
window of this many seconds; an upload uses it per chunk."""

# Two defaults the faces' signatures show, kept here (not in the modules that apply them, which
# import them from here) so that the faces are defined without importing those modules:
# ``import workflows`` leaves seeding and MCP to their first use.

#: The largest single file :func:`~workflows._seed.plan_directory` accepts unless told
#: otherwise: 256 MiB. It is a guard against seeding a data set, a video or model weights by
#: accident (an upload of that size takes minutes); a file over it is an error naming the file,
#: never silently skipped. Pass ``max_file_size=None`` to lift it, or add the file to ``ignore=``.
DEFAULT_MAX_FILE_SIZE: int = 256 * 1024 * 1024

DEFAULT_MCP_TIMEOUT = 60.0
"""Seconds to wait for an MCP server: to connect, and for each answer (a tool may run long)."""


class ApiKey:
    """An API key that never shows itself in a ``repr``, ``str`` or f-string.

    >>> key = ApiKey("sk-secret")
    >>> repr(key), str(key), f"{key}"
    ("ApiKey('********')", '********', '********')
    >>> key.reveal()
    'sk-secret'
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The key itself, for the Authorization header only."""
        return self._value

    @property
    def fingerprint(self) -> str:
        """A short one-way digest that tells keys apart in the ledger without storing them."""
        return hashlib.sha256(self._value.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return "ApiKey('********')"

    def __str__(self) -> str:
        return "********"

    def __format__(self, spec: str) -> str:
        return "********"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApiKey) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("ApiKey cannot be pickled")


@dataclass(frozen=True)
class Settings:
    """Resolved connection settings shared by every call of one sandbox or batch."""

    api_key: ApiKey = field(repr=False)
    base_url: str = DEFAULT_BASE_URL
    timeout: float = DEFAULT_TIMEOUT
    retry_attempts: int = 6
    retry_deadline: float = 120.0


def _read_dotenv_key(path: Path) -> str | None:
    """Read KLAVIS_API_KEY from a ``.env`` file (``KEY=value`` lines, optional quotes/export)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{path} is not UTF-8 text") from exc
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        if not sep or name.strip() != API_KEY_ENV:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        else:
            value = value.split(" #", 1)[0].strip()
        return value or None
    return None


def _find_dotenv(folder: Path) -> Path | None:
    """The ``.env`` of ``folder`` itself, if the current user owns it.

    Only the working folder counts, never its parents: a ``.env`` planted in a shared parent
    such as the temp folder would otherwise send the user's sandboxes into another account.
    For the same reason a ``.env`` owned by another user is refused (on POSIX systems).
    """
    candidate = folder / ".env"
    try:
        st = candidate.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    getuid = getattr(os, "getuid", None)
    if getuid is not None and st.st_uid != getuid():
        raise ConfigurationError(
            f"{candidate} belongs to another user (uid {st.st_uid}); refusing to read an API key "
            "from it. Pass api_key=... or set KLAVIS_API_KEY, or remove that file."
        )
    return candidate


_KEY_FILE_MAX_BYTES = 4096
"""A key file larger than this is not a key file (keys are tens of bytes)."""

_WARNED_READABLE: set[str] = set()


def _read_key_file(name: str) -> str | None:
    """The key in the file ``name`` (``KLAVIS_API_KEY_FILE``), whitespace stripped; see the
    module for what is refused. Links are followed: a Kubernetes secret volume's files are
    links into a folder of its own; the owner and mode checked are those of the file reached,
    read through the descriptor that was checked."""
    path = Path(name).expanduser()
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ConfigurationError(
            f"{API_KEY_FILE_ENV} names {str(path)!r}, which cannot be read ({exc.strerror})"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigurationError(
                f"{API_KEY_FILE_ENV} names {str(path)!r}, which is not a regular file"
            )
        getuid = getattr(os, "getuid", None)
        if getuid is not None and st.st_uid not in (getuid(), 0):
            raise ConfigurationError(
                f"{API_KEY_FILE_ENV} names {str(path)!r}, which belongs to another user (uid "
                f"{st.st_uid}); refusing to read an API key from it"
            )
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ConfigurationError(
                f"{API_KEY_FILE_ENV} names {str(path)!r}, which others may write (mode "
                f"{stat.S_IMODE(st.st_mode):o}); make it writable by its owner only (chmod 600)"
            )
        if st.st_size > _KEY_FILE_MAX_BYTES:
            raise ConfigurationError(
                f"{API_KEY_FILE_ENV} names {str(path)!r}, of {st.st_size} bytes: more than "
                f"{_KEY_FILE_MAX_BYTES}, so not a key file"
            )
        data = os.read(fd, _KEY_FILE_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if st.st_mode & (stat.S_IRGRP | stat.S_IROTH) and str(path) not in _WARNED_READABLE:
        _WARNED_READABLE.add(str(path))
        logging.getLogger("workflows").warning(
            "%s names %s, which other users may read (mode %o): chmod 600 it",
            API_KEY_FILE_ENV,
            path,
            stat.S_IMODE(st.st_mode),
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigurationError(f"{str(path)!r} ({API_KEY_FILE_ENV}) is not UTF-8 text") from None
    return text.strip() or None


def _check_key(value: str, source: str) -> None:
    """Refuse a key that cannot be sent as a header, naming the problem but never the key.

    Keys are printable ASCII without spaces. Anything else (a line break pasted with the key,
    or read from a file with it) would reach the HTTP layer, whose error echoes the header line,
    and the call would be retried although it can never succeed.
    """
    for index, char in enumerate(value):
        if not "!" <= char <= "~":
            if char in "\r\n":
                what = "a line break"
            elif char.isspace():
                what = "a space" if char == " " else "a whitespace character"
            elif ord(char) < 0x20 or ord(char) == 0x7F:
                what = f"a control character (U+{ord(char):04X})"
            else:
                what = f"a non-ASCII character (U+{ord(char):04X})"
            raise ConfigurationError(
                f"the API key from {source} contains {what} at position {index + 1} of "
                f"{len(value)}; API keys are printable ASCII without spaces (check for a stray "
                "line break or quote where the key was copied)"
            )


def _is_positive_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _check_base_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(
            f"base URL must be an http(s) URL like {DEFAULT_BASE_URL!r}, got {url!r}"
        )
    if parts.query or parts.fragment:
        raise ConfigurationError("base URL must not carry a query string or fragment")
    return url.rstrip("/")


def resolve_settings(
    api_key: str | ApiKey | None = None,
    base_url: str | None = None,
    *,
    timeout: float | None = None,
    retry_attempts: int | None = None,
    retry_deadline: float | None = None,
    dotenv: bool = True,
) -> Settings:
    """Resolve settings: argument > environment variable > ``.env`` (key only) > default.

    The key's environment variables: ``KLAVIS_API_KEY``, then ``KLAVIS_API_KEY_FILE`` (a file
    holding it; see the module).

    A ``.env`` file in the working directory (not its parents; owned by the current user) may
    supply ``KLAVIS_API_KEY`` but never the base URL, so a stray file cannot redirect your key.
    The key is checked here (printable ASCII, no spaces), before any request.

    >>> resolve_settings("k", "http://127.0.0.1:8000/").base_url
    'http://127.0.0.1:8000'
    """
    if base_url is not None and not isinstance(base_url, str):
        raise ConfigurationError(f"base_url must be a str, not {type(base_url).__name__}")
    if api_key is not None and not isinstance(api_key, str | ApiKey):
        raise ConfigurationError(
            f"api_key must be a str (or an ApiKey), not {type(api_key).__name__}"
        )
    for name, number in (("timeout", timeout), ("retry_deadline", retry_deadline)):
        if number is not None and not _is_positive_number(number):
            raise ConfigurationError(f"{name} must be a positive number of seconds, got {number!r}")
    if retry_attempts is not None and (
        isinstance(retry_attempts, bool)
        or not isinstance(retry_attempts, int)
        or retry_attempts < 1
    ):
        raise ConfigurationError(
            f"retry_attempts must be a whole number >= 1, got {retry_attempts!r}"
        )
    url = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
    url = _check_base_url(url)
    key: ApiKey | None
    if isinstance(api_key, ApiKey):
        key = api_key
        _check_key(key.reveal(), "the api_key argument")
    else:
        source = "the api_key argument"
        raw = api_key
        if not raw and os.environ.get(API_KEY_ENV):
            raw, source = os.environ.get(API_KEY_ENV), f"the {API_KEY_ENV} environment variable"
        key_file = os.environ.get(API_KEY_FILE_ENV, "").strip()
        if not raw and key_file:
            raw, source = _read_key_file(key_file), f"the file {API_KEY_FILE_ENV} names"
        if not raw and dotenv:
            found = _find_dotenv(Path.cwd())
            raw = _read_dotenv_key(found) if found else None
            source = str(found)
        key = ApiKey(raw.strip()) if raw and raw.strip() else None
        if key is not None:
            _check_key(key.reveal(), source)
    if key is None:
        raise ConfigurationError(
            "no Klavis API key: pass api_key=..., set the KLAVIS_API_KEY environment variable "
            "(or KLAVIS_API_KEY_FILE, the path of a file holding it), or put KLAVIS_API_KEY=... "
            "in a .env file in the current folder. To work offline, "
            "start the local emulator "
            "(`klavis-emulator --port 8000`) and set KLAVIS_BASE_URL=http://127.0.0.1:8000 with "
            "any KLAVIS_API_KEY."
        )
    defaults = Settings(api_key=key)
    return Settings(
        api_key=key,
        base_url=url,
        timeout=defaults.timeout if timeout is None else float(timeout),
        retry_attempts=defaults.retry_attempts if retry_attempts is None else retry_attempts,
        retry_deadline=defaults.retry_deadline if retry_deadline is None else retry_deadline,
    )


def check_keywords(where: str, options: Mapping[str, Any], kind: Any) -> None:
    """A ``TypeError`` naming the first keyword ``options`` holds that the TypedDict ``kind``
    has not, as Python says it of a signature."""
    known = kind.__required_keys__ | kind.__optional_keys__
    for name in options:
        if name not in known:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
