"""Reading a mailbox's messages over IMAP, in bounded memory, as the data documents' emails.

What ``dump`` reads is whatever the mailboxes hold: mail from any loopback process (SMTP
takes mail without a login) or stored by the sandbox's own agent, up to the mail server's
limits (10,240,000 bytes a message, see :mod:`klavis_emulator._mail.server`). Python's
:mod:`email` parser cannot be given such a message: measured on 10 MB messages, it grew by
76 MiB (one base64 body) to 100 MiB (one 8-bit body), 148 MiB and 45 s (186,000
attachments), 297 MiB (1.7 million header lines), 342 MiB and 98 s (a million empty
parts); and its header parser (``policy.default``) grew by 207 MiB on one 100 KiB header of
encoded words. So Dovecot, whose MIME parser is written for hostile mail (C, streaming, at
most 10,000 parts and 100 levels a message), parses the message, and Python reads the
pieces, each bounded:

- the structure: ``BODYSTRUCTURE`` (the parts in order, with their encoding and size);
- the headers the document shows (Subject, From, To, Cc, Bcc, Date, Message-ID) and each
  part's MIME headers: partial fetches of at most :data:`HEADER_BYTES`, each value parsed
  by :mod:`email` (as before, so the same text comes out) up to :data:`HEADER_VALUE_CHARS`
  (longer values are cut there: no real header is that long, and the parser's cost grows
  faster than the value);
- the first ``text/plain`` and ``text/html`` bodies: ``BINARY`` (Dovecot decodes base64 or
  quoted-printable), at most a message's bytes, then the charset;
- an attachment's size: ``BINARY.SIZE`` (decoded by Dovecot, never sent), or the part's
  size for identity encodings.

The walk, the rules (what is an attachment, which body is the text, a part without a body
skipped) and the decoding are those of the earlier reader, which parsed the whole message
with ``email.message_from_bytes(..., policy=email.policy.default)``; for mail made by
``initialize`` or sent by the emails server the output is the same.
"""

from __future__ import annotations

import codecs
import contextlib
import email.parser
import email.policy
import imaplib
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any, Final

from .rules import MAX_MESSAGE_BYTES

__all__ = ["HEADER_BYTES", "HEADER_VALUE_CHARS", "Imap", "Text", "check", "quoted", "read_folder"]

HEADER_BYTES: Final = 64 * 1024
"""The most bytes of one message's (or part's) header block read."""
HEADER_VALUE_CHARS: Final = 16 * 1024
"""The most characters of one header value given to :mod:`email`'s parser (measured: at
most 11 MiB for such a value of addresses, quotes or encoded words)."""

_SIZES_AT_ONCE: Final = 500
_STRUCTURE_BYTES: Final = 64 * 1024
"""Messages whose sizes add up to at most this are asked for their structure at once
(their ``BODYSTRUCTURE`` answers, a few KiB each, or at most about 1 MB for a message of
10,000 parts, asked alone)."""
_PARTS_AT_ONCE: Final = 128
"""Part headers asked for at once: at most 128 x 16 KiB (2 MiB). Sixteen at a time, a
message of 10,000 parts took 15 s of Dovecot's answers, one command per 16 parts."""
_PART_HEADER_BYTES: Final = 16 * 1024
_SIZES_OF_PARTS_AT_ONCE: Final = 200
_NESTED_STRING: Final = 256
_WHOLE: Final = frozenset({"utf-16", "utf-32"})
_FIELDS: Final = ("Subject", "From", "To", "Cc", "Bcc", "Date", "Message-ID")
_PART_FIELDS: Final = "(CONTENT-TYPE CONTENT-DISPOSITION CONTENT-TRANSFER-ENCODING)"
_DECODED_BY_DOVECOT: Final = frozenset({"base64", "quoted-printable"})
_LITERAL_MARK: Final = re.compile(rb"~?\{\d+\}$")
_FIELD_START: Final = re.compile(rb"\r?\n(?![ \t])")
"""Where a header field ends: a line break not followed by a folded line's blank."""
_TOKEN: Final = re.compile(
    rb"\s*(?:(\()|(\))"  # a list opens, closes
    rb'|"((?:[^"\\]|\\.)*)"'  # a quoted string
    rb'|([^\s()"\[]+(?:\[[^\]]*\][^\s()]*)?))'  # an atom, as BODY[HEADER.FIELDS (TO)]<0>
)


class Imap(imaplib.IMAP4):
    """:class:`imaplib.IMAP4` reading lines of up to :data:`MAX_LINE` bytes (imaplib's own
    limit, 1,000,000, is less than a ``BODYSTRUCTURE`` answer may be), and keeping no log
    of them: imaplib keeps the ``repr`` of the last ten lines when Python runs without
    ``-O`` (measured: a dump of two messages of 10,000 parts grew by 68 MiB, 10 MB a
    line kept)."""

    MAX_LINE: Final = MAX_MESSAGE_BYTES + 2 * 1024 * 1024
    """A ``BODYSTRUCTURE`` answer repeats at most a message's bytes (its parameters) and
    adds about 150 bytes a part (at most 10,000)."""

    def readline(self) -> bytes:
        """One line of the server's answer (imaplib's documented hook)."""
        line = self.file.readline(self.MAX_LINE + 1)
        assert isinstance(line, bytes)  # the socket's file, binary
        if len(line) > self.MAX_LINE:
            raise self.error(f"got more than {self.MAX_LINE:,} bytes in a line")
        return line

    def _get_line(self) -> bytes:
        """imaplib's (the same in Python 3.6 to 3.13) without its log of the line."""
        line = self.readline()
        if not line:
            raise self.abort("socket error: EOF")
        if not line.endswith(b"\r\n"):  # the protocol ends every line with CRLF
            raise self.abort(f"socket error: unterminated line: {line[:100]!r}")
        return line[:-2]


def quoted(name: str) -> str:
    """``name`` as an IMAP quoted string."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check(result: tuple[str, list[Any]], what: str) -> None:
    """Raise ``imaplib.IMAP4.error`` unless the command answered OK."""
    typ, answer = result
    if typ != "OK":
        raise imaplib.IMAP4.error(f"{what} failed: {answer!r}")


# ---------------------------------------------------------------------- IMAP answers


def _parse(answer: list[Any]) -> list[Any]:
    """An IMAP answer as imaplib gives it (lines, and (line, literal) pairs) as nested
    lists of strings (atoms, quoted strings; literals as bytes) and None (NIL); the
    answer's lines are let go of once read (the list is emptied).

    Strings nested deeper than a message's items (inside ``BODYSTRUCTURE``, of which the
    reader needs types, encodings and sizes) and longer than :data:`_NESTED_STRING` are
    kept empty, and short strings are shared: 10,000 parts with long parameters make a
    10 MB answer of 100,000 strings."""
    stack: list[list[Any]] = [[]]
    shared: dict[bytes, str] = {}
    pieces = answer[::-1]  # popped from the end: each line goes once read
    answer.clear()
    while pieces:
        piece = pieces.pop()
        text, literal = (piece[0], piece[1]) if isinstance(piece, tuple) else (piece, None)
        del piece
        if not isinstance(text, bytes):
            continue
        end = len(text)
        if literal is not None:  # the line ends with the literal's {size} (~{size}: BINARY)
            marker = _LITERAL_MARK.search(text, max(0, end - 32))
            end = marker.start() if marker is not None else end
        position = 0
        while position < end:
            token = _TOKEN.match(text, position, end)
            if token is None or token.end() == position:
                break
            position = token.end()
            if token[1]:
                stack.append([])
            elif token[2]:
                if len(stack) > 1:
                    closed = stack.pop()
                    stack[-1].append(closed)
            elif token[3] is not None:
                raw = token[3] if len(stack) < 3 or len(token[3]) <= _NESTED_STRING else b""
                stack[-1].append(_shared(shared, re.sub(rb"\\(.)", rb"\1", raw)))
            elif token[4]:
                atom = _shared(shared, token[4])
                stack[-1].append(None if atom.upper() == "NIL" else atom)
        del text
        if literal is not None:  # bytes: the caller decodes what it needs
            nested = len(stack) >= 3 and len(literal) > _NESTED_STRING
            stack[-1].append(b"" if nested else literal)
    while len(stack) > 1:  # an unfinished answer: keep what was read
        closed = stack.pop()
        stack[-1].append(closed)
    return stack[0]


def _shared(shared: dict[bytes, str], raw: bytes) -> str:
    """``raw`` decoded, the same object for the same short string."""
    if len(raw) > 32:
        return raw.decode("utf-8", "replace")
    found = shared.get(raw)
    if found is None:
        found = shared[raw] = raw.decode("utf-8", "replace")
    return found


def _items(answer: list[Any]) -> Iterator[dict[str, Any]]:
    """The FETCH items of each message of an answer: {"UID": "7", "FLAGS": [...], ...}
    (the answer's list is emptied, see :func:`_parse`)."""
    parsed = _parse(answer)
    for number, value in itertools.pairwise(parsed):
        if isinstance(number, str) and number.isdigit() and isinstance(value, list):
            pairs = iter(value)
            yield {
                str(key).upper(): item
                for key, item in zip(pairs, pairs, strict=False)
                if isinstance(key, str)
            }


def _uid_set(uids: list[int]) -> str:
    return ",".join(str(uid) for uid in uids)


# ---------------------------------------------------------------------- structure


@dataclass(frozen=True)
class Text:
    """A body as its bytes and charset: decoded (``errors="replace"``) only as it is
    written, in slices (:meth:`decoded`), never whole: up to 10 MB of bytes that are not
    UTF-8 make 20 MB of replacement characters."""

    content: bytes
    charset: str

    def decoded(self, slice_bytes: int) -> Iterator[str]:
        """The text, in pieces of at most ``slice_bytes`` bytes' worth; joined, they are
        ``content.decode(charset, "replace")``. (Whole for UTF-16 and UTF-32, whose
        incremental decoders, unlike ``bytes.decode``, want a byte order mark: checked for
        every codec of the standard library; at most 10 MB of bytes, 5 million
        characters.)"""
        if codecs.lookup(self.charset).name in _WHOLE:
            yield self.content.decode(self.charset, "replace")
            return
        decoder = codecs.getincrementaldecoder(self.charset)("replace")
        view = memoryview(self.content)
        for start in range(0, len(view), slice_bytes):
            yield decoder.decode(view[start : start + slice_bytes])
        yield decoder.decode(b"", final=True)


@dataclass(frozen=True)
class _Leaf:
    """A part with a body (not a multipart or message/rfc822 container), in walk order."""

    section: str  # for BINARY[...] and BODY[...]: "1", "2.1"...
    header: str  # its header block: "HEADER", "2.HEADER" (a message's) or "2.1.MIME"
    encoding: str
    size: int


def _leaves(structure: Any) -> list[_Leaf]:
    """The leaves of a message's BODYSTRUCTURE, in the order :meth:`Message.walk` yields
    them (pre-order; an encapsulated message's parts follow its message/rfc822 part)."""
    found: list[_Leaf] = []
    if isinstance(structure, list):
        _message_leaves(structure, "", "HEADER", found)
    return found


def _children(body: list[Any]) -> list[list[Any]]:
    """The parts of a multipart body (its leading lists; then come its subtype and
    extension data)."""
    parts = []
    for item in body:
        if not isinstance(item, list):
            break
        parts.append(item)
    return parts


def _message_leaves(body: list[Any], prefix: str, header: str, found: list[_Leaf]) -> None:
    """The leaves of a message (the top one, or one encapsulated at ``prefix``)."""
    if body and isinstance(body[0], list):
        for number, child in enumerate(_children(body), 1):
            _part_leaves(child, f"{prefix}.{number}" if prefix else str(number), None, found)
    else:
        _part_leaves(body, f"{prefix}.1" if prefix else "1", header, found)


def _part_leaves(body: list[Any], section: str, header: str | None, found: list[_Leaf]) -> None:
    if body and isinstance(body[0], list):
        for number, child in enumerate(_children(body), 1):
            _part_leaves(child, f"{section}.{number}", None, found)
        return
    kind = [str(item).lower() if isinstance(item, str) else "" for item in body[:2]]
    if kind == ["message", "rfc822"] and len(body) > 8 and isinstance(body[8], list):
        _message_leaves(body[8], section, f"{section}.HEADER", found)
        return
    encoding = body[5] if len(body) > 5 and isinstance(body[5], str) else ""
    size = body[6] if len(body) > 6 and isinstance(body[6], str) and body[6].isdigit() else "0"
    found.append(_Leaf(section, header or f"{section}.MIME", encoding.lower(), int(size)))


# ---------------------------------------------------------------------- headers


def _header_request(header: str) -> str:
    """The FETCH item for a leaf's header block (bounded)."""
    if header.endswith("HEADER"):  # a message's header: only the fields that matter
        return f"BODY.PEEK[{header}.FIELDS {_PART_FIELDS}]<0.{_PART_HEADER_BYTES}>"
    return f"BODY.PEEK[{header}]<0.{_PART_HEADER_BYTES}>"


def _header_message(block: bytes) -> EmailMessage:
    """A header block as a message without a body, each field cut to
    :data:`HEADER_VALUE_CHARS` bytes (values are parsed when read, see the module
    docstring)."""
    fields = _FIELD_START.split(block)
    cut = b"\r\n".join(field[:HEADER_VALUE_CHARS] for field in fields)
    parser = email.parser.BytesHeaderParser(policy=email.policy.default)
    message = parser.parsebytes(cut)
    assert isinstance(message, EmailMessage)  # policy.default's message factory
    return message


def _value(message: EmailMessage, name: str) -> str | None:
    """A header's value as :mod:`email` decodes it (the raw value if it cannot)."""
    try:
        value = message[name]
    except Exception:  # noqa: BLE001 - hostile headers trip many parts of the parser
        raw = next((v for k, v in message.raw_items() if k.lower() == name.lower()), None)
        return None if raw is None else str(raw)
    return None if value is None else str(value)


@dataclass(frozen=True)
class _Part:
    """What the reader needs of a leaf's headers."""

    attachment: bool
    filename: str
    content_type: str
    charset: str
    typed: bool  # it has a Content-Type header


def _part(block: bytes) -> _Part:
    message = _header_message(block)
    try:
        filename = message.get_filename()
        return _Part(
            message.is_attachment() or filename is not None,
            filename or "",
            message.get_content_type(),
            message.get_content_charset() or "utf-8",
            message.get("Content-Type") is not None,
        )
    except Exception:  # noqa: BLE001 - a header email cannot read: an unnamed attachment
        return _Part(True, "", "application/octet-stream", "utf-8", True)


def _sections(answer: list[Any]) -> dict[str, bytes]:
    """The literal of each ``BODY[...]`` or ``BINARY[...]`` item of a one-message answer,
    by section."""
    found: dict[str, bytes] = {}
    for items in _items(answer):
        for key, value in items.items():
            section = re.fullmatch(r"(?:BODY|BINARY)\[([^\]]*)\](?:<\d+>)?", key)
            if section is not None:
                text = value if isinstance(value, bytes) else (value or "").encode()
                found[re.sub(r"\.FIELDS.*", "", section[1])] = text
    return found


# ---------------------------------------------------------------------- messages


def read_folder(imap: imaplib.IMAP4, folder: str) -> Iterator[dict[str, Any]]:
    """The messages of a folder (the logged-in account's), by UID, as the documents'
    emails, their bodies as :class:`Text`; a few at a time (see the module docstring)."""
    typ, _ = imap.select(quoted(folder), readonly=True)
    if typ != "OK":
        return
    typ, answer = imap.uid("SEARCH", "ALL")
    check((typ, answer), f"SEARCH in {folder}")
    uids = [int(uid) for uid in (answer[0] or b"").split()] if answer else []
    for start in range(0, len(uids), _SIZES_AT_ONCE):
        batch: list[int] = []
        batch_bytes = 0
        for uid, size in _sizes(imap, uids[start : start + _SIZES_AT_ONCE], folder):
            if batch and batch_bytes + size > _STRUCTURE_BYTES:
                yield from _messages(imap, batch, folder)
                batch, batch_bytes = [], 0
            batch.append(uid)
            batch_bytes += size
        if batch:
            yield from _messages(imap, batch, folder)
    imap.close()


def _sizes(imap: imaplib.IMAP4, uids: list[int], folder: str) -> list[tuple[int, int]]:
    """(UID, size) of the messages with these UIDs (those still there), by UID."""
    typ, answer = imap.uid("FETCH", _uid_set(uids), "(UID RFC822.SIZE)")
    check((typ, answer), f"FETCH sizes in {folder}")
    found = []
    for items in _items(answer):
        uid, size = items.get("UID"), items.get("RFC822.SIZE")
        if isinstance(uid, str) and uid.isdigit() and isinstance(size, str) and size.isdigit():
            found.append((int(uid), int(size)))
    return sorted(found)


def _messages(imap: imaplib.IMAP4, uids: list[int], folder: str) -> Iterator[dict[str, Any]]:
    """The messages with these UIDs (those still there), by UID."""
    fields = " ".join(name.upper() for name in _FIELDS)
    request = f"(UID FLAGS BODYSTRUCTURE BODY.PEEK[HEADER.FIELDS ({fields})]<0.{HEADER_BYTES}>)"
    typ, answer = imap.uid("FETCH", _uid_set(uids), request)
    check((typ, answer), f"FETCH in {folder}")
    found: list[tuple[int, list[str], list[_Leaf], bytes]] = []
    for items in _items(answer):  # each structure becomes its leaves: the tree goes
        uid = items.get("UID")
        if not (isinstance(uid, str) and uid.isdigit()):
            continue
        flags = [flag for flag in items.get("FLAGS") or [] if isinstance(flag, str)]
        headers = next((v for k, v in items.items() if k.startswith("BODY[")), b"")
        block = headers if isinstance(headers, bytes) else (headers or "").encode()
        found.append((int(uid), flags, _leaves(items.get("BODYSTRUCTURE")), block))
    del answer
    for uid, flags, leaves, block in sorted(found, key=lambda entry: entry[0]):
        yield _email(imap, uid, set(flags), folder, leaves, block)


def _email(
    imap: imaplib.IMAP4, uid: int, flags: set[str], folder: str, leaves: list[_Leaf], block: bytes
) -> dict[str, Any]:
    """One message as a document's email (its bodies as :class:`Text`)."""
    headers = _header_message(block)
    parts = _parts(imap, uid, leaves)
    attached = [leaf for leaf, part in zip(leaves, parts, strict=True) if part.attachment]
    sizes = _attachment_sizes(imap, uid, attached)
    body_text = body_html = None
    attachments: list[dict[str, Any]] = []
    for leaf, part in zip(leaves, parts, strict=True):
        if part.attachment:
            attachments.append(
                {
                    "filename": part.filename,
                    "content_type": part.content_type,
                    "size": sizes.get(leaf.section, leaf.size),
                }
            )
            continue
        wanted = (part.content_type == "text/plain" and body_text is None) or (
            part.content_type == "text/html" and body_html is None
        )
        if not wanted:
            continue  # the earlier reader decoded it and kept nothing
        content = _content(imap, uid, leaf)
        if not part.typed and (not content or content.isspace()):
            continue  # a message without a body (none was given)
        text = Text(content, part.charset if _known_charset(part.charset) else "utf-8")
        if part.content_type == "text/plain":
            body_text = text
        else:
            body_html = text
    return {
        "email_id": str(uid),
        "subject": _value(headers, "Subject") or "",
        "from_addr": _value(headers, "From") or "",
        "to_addr": _value(headers, "To") or "",
        "cc_addr": _value(headers, "Cc"),
        "bcc_addr": _value(headers, "Bcc"),
        "date": _value(headers, "Date"),
        "message_id": _value(headers, "Message-ID"),
        "body_text": body_text,
        "body_html": body_html,
        "is_read": "\\Seen" in flags,
        "is_important": "\\Flagged" in flags,
        "folder": folder,
        "attachments": attachments or None,
    }


def _parts(imap: imaplib.IMAP4, uid: int, leaves: list[_Leaf]) -> list[_Part]:
    """What each leaf's headers say, asked for a few leaves at a time."""
    parts: list[_Part] = []
    for start in range(0, len(leaves), _PARTS_AT_ONCE):
        group = leaves[start : start + _PARTS_AT_ONCE]
        request = "(" + " ".join(_header_request(leaf.header) for leaf in group) + ")"
        typ, answer = imap.uid("FETCH", str(uid), request)
        check((typ, answer), f"FETCH part headers of {uid}")
        blocks = _sections(answer)
        del answer
        parts.extend(_part(blocks.get(leaf.header, b"")) for leaf in group)
    return parts


def _attachment_sizes(imap: imaplib.IMAP4, uid: int, leaves: list[_Leaf]) -> dict[str, int]:
    """The decoded sizes of the leaves Dovecot decodes (the others' are their sizes), as
    ``get_payload(decode=True)`` would give them."""
    decoded = [leaf for leaf in leaves if leaf.encoding in _DECODED_BY_DOVECOT]
    sizes: dict[str, int] = {}
    for start in range(0, len(decoded), _SIZES_OF_PARTS_AT_ONCE):
        group = decoded[start : start + _SIZES_OF_PARTS_AT_ONCE]
        request = "(" + " ".join(f"BINARY.SIZE[{leaf.section}]" for leaf in group) + ")"
        typ, answer = imap.uid("FETCH", str(uid), request)
        if typ != "OK":  # Dovecot could not decode one: ask one by one, keep what it can
            if len(group) > 1:
                for leaf in group:
                    sizes.update(_attachment_sizes(imap, uid, [leaf]))
            continue
        for items in _items(answer):
            for key, value in items.items():
                section = re.fullmatch(r"BINARY\.SIZE\[([^\]]*)\]", key)
                if section is not None and isinstance(value, str) and value.isdigit():
                    sizes[section[1]] = int(value)
    return sizes


def _content(imap: imaplib.IMAP4, uid: int, leaf: _Leaf) -> bytes:
    """A leaf's body, decoded by Dovecot (base64, quoted-printable), else as stored."""
    for item in (f"BINARY.PEEK[{leaf.section}]", f"BODY.PEEK[{leaf.section}]"):
        with contextlib.suppress(imaplib.IMAP4.error):
            typ, answer = imap.uid("FETCH", str(uid), f"({item})")
            if typ == "OK":
                return _sections(answer).get(leaf.section, b"")
    return b""


def _known_charset(charset: str) -> bool:
    """Whether Python has a text codec for ``charset`` (``b"".decode`` looks none up; and
    ``hex``, ``base64``... are codecs from bytes to bytes)."""
    try:
        b"\x00".decode(charset, "replace")
    except LookupError:
        return False
    return True
