"""A real mail server per sandbox, for the ``poste_email_toolathlon`` MCP server.

On the service that server talks IMAP and SMTP to a Poste.io mail server, whose address
and ports the sandbox's ``auth_data`` carries. The emulator starts, per sandbox that holds
it, on free loopback ports:

- IMAP: Dovecot (the distribution's ``dovecot-imapd``), run by the emulator's user with a
  generated configuration: one IMAP listener, no TLS (loopback), a passwd-file with the
  sandbox's account, Maildir storage with ``Sent``, ``Drafts`` and ``Trash`` folders;
- SMTP: :mod:`klavis_emulator._mail_smtp` (aiosmtpd) on a socket bound here, checking AUTH
  against the same passwd-file (when a client logs in), delivering with ``dovecot-lda``.

Everything lives in one private folder per sandbox under the system's temporary folder
(``klavis-mail-*``, not the workspace: the service keeps mail in its mail server, not in
the agent's files): a short path, since Dovecot's Unix sockets live there and their paths
are limited to about 100 bytes, which a data folder's path can exceed. The folder is
reachable (mode 0711) by the unprivileged users Dovecot switches to when the emulator runs
as root (``dovenull`` for logins, ``dovecot`` for the mailboxes; Dovecot refuses root for
both); the mailboxes themselves are 0700. Stopping kills both process groups and removes
the folder. Processes also die with the emulator where ``setpriv`` exists.

Who can read a sandbox's mail. Its SMTP port takes mail from any loopback process without
a login (the emails server never logs in), and processes of other sandboxes can reach it
(playwright's browser and the emails servers share the emulator's network; ports show in
``/proc/net/tcp``). So every password Dovecot and SMTP AUTH accept is random
(:mod:`secrets`, 144 bits) and nobody but the emulator chooses one:

- the sandbox's own account: made at acquire, given only in the sandbox's ``auth_data``
  (the tenant's API answers) and in its emails server's private configuration;
- an account an ``initialize`` document names: made then, never given out (it was the
  address, which anyone could guess); the data endpoints log in as it, the tenant reads its
  mail with ``dump``;
- an ``x-email-config`` header (Klavis's notebooks: base64 JSON ``email``, ``password``,
  ``name``) naming any account but the sandbox's own: the first such header for an
  address sets the password *that header must carry* (the emulator checks it; the MCP URL
  is the sandbox's capability, so only its holder can send one) and the emails server it
  starts logs in with the account's random password, made then for a new address, the
  seeded one for a named user. A later header with another password gets an emails server
  that logs in with that password, and fails to, as on a real server. A header naming the
  sandbox's own account logs in with the header's password: right only if it is
  ``auth_data``'s.

Rejected: giving Dovecot the first header's password (what the benchmark's own Poste.io
holds: its accounts were made with those passwords). Harnesses send the benchmark's
published passwords (Toolathlon's ``michelle_60R``): every sandbox running the same task
would then have the same password for the same account, and another tenant that knows
the benchmark could log in to this sandbox's IMAP with it. The cost of the choice: a
harness cannot log in to IMAP or SMTP itself with a header's password (it reads mail with
``dump``). Header
accounts and their passwords last as long as the sandbox (a reset keeps them, so that the
emails servers started for them still log in), named users until the next ``initialize``
or reset. The passwd-file holding the passwords is readable by the emulator's user and
Dovecot's only (0600, or 0640 with Dovecot's group when the emulator runs as root).

Limits (a real mail server's, so that a process on loopback cannot fill the host's
temporary folder nor make the emulator read more than it can hold):

- a message: at most :data:`MAX_MESSAGE_BYTES` (10,240,000, Postfix's default
  ``message_size_limit``; Toolathlon's mail is a few KiB a message): the SMTP server
  advertises it (``SIZE``) and answers 552 over it (aiosmtpd's ``data_size_limit``, which
  stops keeping the data past it), Dovecot refuses a larger APPEND
  (``quota_max_mail_size``) and ``initialize`` a larger message (422);
- recipients: at most :data:`MAX_RECIPIENTS` (100) a message, RFC 5321's minimum a server
  must accept (§4.5.3.1.8; Postfix allows 1,000, but every recipient is a copy here: any
  recipient address gets a mailbox); the next RCPT is answered 452 4.5.3 (§4.5.3.1.10);
- the sandbox's mail: at most :data:`MAX_MAIL_BYTES` (51,200,000, Postfix's default
  ``mailbox_size_limit``) of disk, as ``du`` counts it (blocks, every mailbox and index
  included): SMTP answers 552 5.2.2 to a message whose copies would pass it, and keeps
  nothing of it; ``initialize`` refuses a document whose messages pass it (422). An
  account's own IMAP writes (APPEND, COPY: only the sandbox's accounts can log in) are
  bounded by Dovecot's quota, the same size per account. Another tenant can still fill a
  sandbox's mail up to the limit (it can deliver mail, by design): the sandbox then
  refuses mail until a reset or until its agent deletes some.

No asyncio here: :class:`MailServer` is blocking, called from worker threads.
"""

from __future__ import annotations

import base64
import binascii
import concurrent.futures
import contextlib
import grp
import hmac
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "DEFAULT_ACCOUNT",
    "MAX_MAIL_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_RECIPIENTS",
    "MailAccount",
    "MailError",
    "MailServer",
    "disk_usage",
    "find_lda",
    "is_plain_address",
    "new_password",
]

DEFAULT_ACCOUNT: Final = "agent@mcp.com"
"""The account of a sandbox acquired without ``test_account_email`` (Toolathlon's mail
accounts live in the ``mcp.com`` domain)."""

LOOPBACK: Final = "127.0.0.1"

MAX_MESSAGE_BYTES: Final = 10_240_000
"""The largest message the mail server takes, by SMTP, IMAP or ``initialize`` (Postfix's
default ``message_size_limit``; see the module docstring)."""
MAX_RECIPIENTS: Final = 100
"""The most recipients of one SMTP message (RFC 5321's minimum, §4.5.3.1.8)."""
MAX_MAIL_BYTES: Final = 51_200_000
"""The most disk a sandbox's mail may use (Postfix's default ``mailbox_size_limit``), as
:func:`disk_usage` counts it; also Dovecot's quota of each account."""

_ADDRESS: Final = re.compile(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,253}")
_BAD_CHARS: Final = frozenset(":\r\n\0")

_START_TIMEOUT: Final = 15.0
_STOP_GRACE: Final = 5.0
_LDA_PLACES: Final = ("lib/dovecot/dovecot-lda", "libexec/dovecot/dovecot-lda")


class MailError(RuntimeError):
    """The mail server could not start (the message carries Dovecot's own words)."""


@dataclass(frozen=True)
class MailAccount:
    """The account the MCP server logs in as (IMAP and SMTP)."""

    email: str
    password: str
    name: str

    @classmethod
    def for_sandbox(cls, email: str | None) -> MailAccount:
        """The sandbox's account: ``email`` (its ``test_account_email``) when it is a plain
        address (``name@domain``), else the default; with a fresh random password."""
        address = (email or "").strip().lower()
        if not _ADDRESS.fullmatch(address):
            address = DEFAULT_ACCOUNT
        local = address.split("@", 1)[0]
        name = " ".join(part.capitalize() for part in local.replace("_", ".").split(".") if part)
        return cls(address, new_password(), name or local)

    @classmethod
    def from_header(cls, value: str) -> MailAccount:
        """The account of an ``x-email-config`` header: base64-encoded JSON with ``email``,
        ``password`` and ``name`` (how the service's clients choose the account per request).

        Raises:
            ValueError: the header is not that (the message says what is wrong).
        """
        try:
            data = json.loads(base64.b64decode(value.strip(), validate=True))
        except (ValueError, binascii.Error):
            raise ValueError(
                "x-email-config must be base64-encoded JSON such as "
                '{"email": "...", "password": "...", "name": "..."}'
            ) from None
        if not isinstance(data, dict):
            raise ValueError("x-email-config must hold a JSON object")
        email, password, name = (data.get(key, "") for key in ("email", "password", "name"))
        if not all(isinstance(part, str) for part in (email, password, name)):
            raise ValueError("x-email-config: email, password and name must be strings")
        if not _ADDRESS.fullmatch(email) or not password or _BAD_CHARS & set(password):
            raise ValueError(
                "x-email-config needs an email address (name@domain) and a non-empty password "
                "without ':' or line breaks"
            )
        return cls(email.lower(), password, name or email.split("@", 1)[0])

    def __repr__(self) -> str:
        return f"MailAccount(email={self.email!r})"


def new_password() -> str:
    """A password no one can guess: 144 random bits (24 URL-safe characters)."""
    return secrets.token_urlsafe(18)


def disk_usage(folder: Path) -> int:
    """The bytes of disk ``folder``'s tree takes, as ``du`` counts them (allocated blocks,
    folders included; links not followed); 0 when it does not exist. Maildir files are
    small and many: counting blocks, not sizes, bounds the disk a million tiny messages
    would take."""
    total = 0
    pending = [os.fspath(folder)]
    while pending:
        try:
            entries = os.scandir(pending.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # Dovecot renamed or removed it meanwhile
                    continue
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
    with contextlib.suppress(FileNotFoundError):
        total += os.lstat(folder).st_blocks * 512
    return total


def is_plain_address(text: str) -> bool:
    """Whether ``text`` is a plain address (``name@domain``), the only accounts made."""
    return _ADDRESS.fullmatch(text) is not None


def find_lda(dovecot: Path) -> Path | None:
    """Dovecot's delivery agent beside a ``dovecot`` executable (``<prefix>/lib/dovecot``
    on Debian, ``<prefix>/libexec/dovecot`` elsewhere), or None."""
    prefix = dovecot.resolve().parent.parent
    for place in _LDA_PLACES:
        candidate = prefix / place
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port() -> int:
    """A free loopback port, asked of the OS (Dovecot binds its listener itself)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class _Users:
    internal: str
    internal_group: str
    login: str
    mail_uid: int
    mail_gid: int


def _users() -> _Users:
    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(os.getegid()).gr_name
        return _Users(me.pw_name, group, me.pw_name, me.pw_uid, os.getegid())
    try:  # Dovecot refuses root for logins and mail: its packaged system users
        dovecot = pwd.getpwnam("dovecot")
        pwd.getpwnam("dovenull")
    except KeyError as exc:
        raise MailError(
            "the emulator runs as root and the system users 'dovecot' and 'dovenull' "
            "(made by the dovecot-core package) are missing"
        ) from exc
    group = grp.getgrgid(dovecot.pw_gid).gr_name
    return _Users("dovecot", group, "dovenull", dovecot.pw_uid, dovecot.pw_gid)


def _dovecot_group() -> int | None:
    """The group of Dovecot's internal user (as root), or None when it is missing (then
    :meth:`MailServer.start` says so)."""
    try:
        return pwd.getpwnam("dovecot").pw_gid
    except KeyError:
        return None


def _config(root: Path, imap_port: int, users: _Users) -> str:
    mail = root / "mail"
    return f"""# generated by klavis-emulator for one sandbox
instance_name = klavis-mail-{root.name}
base_dir = {root}/run
state_dir = {root}/state
log_path = /dev/stderr
protocols = imap
listen = {LOOPBACK}
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
default_internal_user = {users.internal}
default_internal_group = {users.internal_group}
default_login_user = {users.login}
first_valid_uid = {users.mail_uid}
first_valid_gid = {users.mail_gid}
mail_location = maildir:{mail}/%Lu
mail_plugins = $mail_plugins quota
plugin {{
  quota = count:User quota
  quota_vsizes = yes
  quota_rule = *:storage={MAX_MAIL_BYTES // 1024}k
  quota_max_mail_size = {MAX_MESSAGE_BYTES // 1024}k
}}
namespace inbox {{
  inbox = yes
  mailbox Sent {{
    special_use = \\Sent
    auto = subscribe
  }}
  mailbox Drafts {{
    special_use = \\Drafts
    auto = subscribe
  }}
  mailbox Trash {{
    special_use = \\Trash
    auto = subscribe
  }}
}}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%Lu {root}/passwd
}}
userdb {{
  driver = static
  args = uid={users.mail_uid} gid={users.mail_gid} home={mail}/%Lu allow_all_users=yes
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = {LOOPBACK}
    port = {imap_port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
"""


_SPAWNER: Final = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mail-spawner")
"""Starts the mail processes. ``setpriv --pdeathsig`` kills a process when the *thread*
that started it ends, not the emulator: worker threads come and go, this one lives as long
as the emulator."""


def _spawn(argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own, dying with the emulator where ``setpriv``
    exists."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv is not None:
        argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, **options)

    return _SPAWNER.submit(popen).result()


class MailServer:
    """One sandbox's IMAP + SMTP server (see the module docstring).

    Its ports are chosen when it is made (so the sandbox's ``auth_data`` can name them at
    acquire); :meth:`start` starts the processes, :meth:`stop` ends them and removes its
    folder, :meth:`clear` empties the mailboxes (reset), :meth:`replace` empties them and
    makes the accounts a data document names (initialize), :meth:`login_password` answers
    an ``x-email-config`` header. Thread-safe; :attr:`lock` (held by those) serializes
    longer work on the mailboxes.
    """

    def __init__(self, account: MailAccount, dovecot: Path, lda: Path) -> None:
        self.account = account
        self._dovecot = dovecot
        self._lda = lda
        self._lock = threading.RLock()
        self._chosen: dict[str, str] = {}  # accounts x-email-config headers chose: passwords
        self._claims: dict[str, str] = {}  # the password the first such header carried
        self._seeded: dict[str, str] = {}  # accounts a data document named: passwords
        self.loaded = False
        """Whether the mailboxes hold a data document (or none is due): False when made and
        after :meth:`clear`, True after :meth:`replace` (see ``McpHost``)."""
        self.root = Path(tempfile.mkdtemp(prefix="klavis-mail-"))
        self.root.chmod(0o711)
        self._smtp_socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._smtp_socket.bind((LOOPBACK, 0))
        self._smtp_socket.listen(64)
        self.smtp_port = int(self._smtp_socket.getsockname()[1])
        self.imap_port = _free_port()
        self._imap: subprocess.Popen[bytes] | None = None
        self._smtp: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._write_passwd()

    def __repr__(self) -> str:
        return (
            f"MailServer(account={self.account.email!r}, imap={self.imap_port}, "
            f"smtp={self.smtp_port}, running={self.running})"
        )

    @property
    def running(self) -> bool:
        """Whether both processes are up."""
        return all(p is not None and p.poll() is None for p in (self._imap, self._smtp))

    @property
    def pids(self) -> tuple[int, ...]:
        """The process ids of Dovecot's master and of the SMTP server (while they run)."""
        return tuple(p.pid for p in (self._imap, self._smtp) if p is not None)

    @property
    def lock(self) -> threading.RLock:
        """The server's lock (reentrant): hold it to work on the mailboxes undisturbed."""
        return self._lock

    def login_password(self, account: MailAccount) -> str:
        """The password an emails server started for an ``x-email-config`` header naming
        ``account`` logs in with (the rule is in the module docstring): the account's own
        when the header is the first for its address or carries the same password as the
        first (the account is made if it does not exist), else the header's, which fails.
        The sandbox's own account: the header's password (right only if it is
        ``auth_data``'s)."""
        with self._lock:
            if account.email == self.account.email:
                return account.password
            first = self._claims.setdefault(account.email, account.password)
            if not hmac.compare_digest(first.encode(), account.password.encode()):
                return account.password
            if account.email not in self._chosen:  # kept by later documents and resets
                seeded = self._seeded.get(account.email)
                self._chosen[account.email] = seeded or new_password()
                self._write_passwd()  # Dovecot rereads the file when it changes
            return self._chosen[account.email]

    def accounts(self) -> dict[str, str]:
        """Every account that can log in, with its password: the sandbox's own first, then
        those ``x-email-config`` chose, then those a data document named."""
        with self._lock:
            merged = {self.account.email: self.account.password}
            for more in (self._chosen, self._seeded):
                for address, password in more.items():
                    merged.setdefault(address, password)
            return merged

    def _write_passwd(self) -> None:
        """Write the passwd-file (atomically: the SMTP server and Dovecot reread it any
        time), readable by the emulator's user and, as root, by Dovecot's auth process
        (which runs as Dovecot's user)."""
        passwd = self.root / "passwd"
        lines = "".join(f"{user}:{{PLAIN}}{pw}\n" for user, pw in self.accounts().items())
        partial = passwd.with_suffix(".new")
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with open(descriptor, "w", encoding="utf-8") as file:
            group = _dovecot_group() if os.geteuid() == 0 else None
            if group is not None:  # before anything is written
                os.fchown(descriptor, 0, group)
                os.fchmod(descriptor, 0o640)
            file.write(lines)
        partial.replace(passwd)

    def auth_data(self) -> dict[str, Any]:
        """What the sandbox's server item carries: the mail server's address and ports and
        the account, in the emails MCP server's configuration format."""
        return {
            "email": self.account.email,
            "password": self.account.password,
            "name": self.account.name,
            "imap_server": LOOPBACK,
            "imap_port": self.imap_port,
            "smtp_server": LOOPBACK,
            "smtp_port": self.smtp_port,
            "use_ssl": False,
            "use_starttls": False,
        }

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the processes unless they run; returns once IMAP accepts connections.

        Raises:
            MailError: Dovecot did not start (its log is in the message), or the server
                was stopped.
        """
        with self._lock:
            if self._closed:
                raise MailError("the mail server was stopped")
            if self.running:
                return
            self._kill()
            users = _users()
            mail = self.root / "mail"
            mail.mkdir(mode=0o700, exist_ok=True)
            if os.geteuid() == 0:
                os.chown(mail, users.mail_uid, users.mail_gid)
            for attempt in range(3):
                if attempt:  # the port chosen at acquire was taken meanwhile: another one
                    self.imap_port = _free_port()
                (self.root / "dovecot.conf").write_text(_config(self.root, self.imap_port, users))
                if self._start_imap():
                    break
            else:
                raise MailError(f"Dovecot did not start: {self.log_tail()}")
            with (self.root / "smtp.log").open("ab") as log:
                self._smtp = _spawn(
                    [
                        sys.executable, "-m", "klavis_emulator._mail_smtp",
                        "--listen-fd", str(self._smtp_socket.fileno()),
                        "--passwd", str(self.root / "passwd"),
                        "--lda", str(self._lda),
                        "--config", str(self.root / "dovecot.conf"),
                        "--mail", str(mail),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    pass_fds=(self._smtp_socket.fileno(),),
                )  # fmt: skip

    def _start_imap(self) -> bool:
        """Start Dovecot in the foreground; True once it listens (it says "starting up"
        after binding its listeners), False when it exited (port taken...)."""
        log = (self.root / "imap.log").open("ab")  # before the spawn: a failure leaks nothing
        try:
            process = _spawn(
                [str(self._dovecot), "-F", "-c", str(self.root / "dovecot.conf")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except BaseException:
            log.close()
            raise
        ready = threading.Event()
        listening = False

        def copy_log() -> None:  # drains Dovecot's stderr into its log file, for ever
            nonlocal listening
            assert process.stderr is not None
            with log, process.stderr:
                for line in process.stderr:
                    log.write(line)
                    log.flush()
                    if b"starting up" in line:
                        listening = True
                        ready.set()
            ready.set()  # it exited

        threading.Thread(target=copy_log, name="dovecot-log", daemon=True).start()
        if not ready.wait(_START_TIMEOUT) or not listening:
            _kill_group(process)
            return False
        self._imap = process
        return True

    def stop(self) -> None:
        """End both processes (waiting for them) and remove the folder; idempotent."""
        with self._lock:
            self._closed = True
            self._kill()
            self._smtp_socket.close()
            shutil.rmtree(self.root, ignore_errors=True)

    def clear(self) -> None:
        """Empty every mailbox and forget the accounts data documents named (the sandbox
        was reset); restarts the processes if they ran."""
        with self._lock:
            if self._closed:
                return
            was_running = self.running
            self._kill()
            shutil.rmtree(self.root / "mail", ignore_errors=True)
            self._seeded = {}
            self.loaded = False
            self._write_passwd()
            if was_running:
                self.start()

    def replace(self, seeded: Iterable[str]) -> dict[str, str]:
        """Empty every mailbox, make the accounts ``seeded`` names (addresses, lower case;
        a random password each, unless the account exists) and start the processes; every
        account's password.

        Fresh mailboxes (not expunged ones), so UIDs start at 1 again.

        Raises:
            MailError: as :meth:`start`.
        """
        with self._lock:
            if self._closed:
                raise MailError("the mail server was stopped")
            self._kill()
            shutil.rmtree(self.root / "mail", ignore_errors=True)
            self._seeded = {address: new_password() for address in seeded}
            self.loaded = True
            self._write_passwd()
            self.start()
            return self.accounts()

    def _kill(self) -> None:
        for process in (self._imap, self._smtp):
            if process is not None:
                _kill_group(process)
        self._imap = self._smtp = None

    def log_tail(self, limit: int = 600) -> str:
        """The end of Dovecot's and the SMTP server's logs (for error messages)."""
        text = ""
        for name in ("imap", "smtp"):
            with contextlib.suppress(OSError):
                text += (self.root / f"{name}.log").read_text("utf-8", "replace")
        return text.strip()[-limit:]


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process's group and reap its leader.

    Not SIGTERM first: Dovecot's master, sent SIGTERM with its group, took more than 5 s to
    end (measured), and whatever it would flush goes with the folder anyway (a stop removes
    it, a reset empties the mailboxes). Maildir delivery is atomic (a rename). The group's
    other processes are reaped by init.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(_STOP_GRACE)
