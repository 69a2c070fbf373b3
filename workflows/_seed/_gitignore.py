"""Git's ignore rules (``.gitignore``, ``.sandboxignore``, ``ignore=``), as
:func:`workflows._seed.plan_directory` applies them folder by folder.

:func:`parse_patterns` turns the lines of an ignore file into patterns, :func:`read_rules` reads
one file into :class:`IgnoreRules`, and :func:`is_ignored` decides for one path.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from workflows._errors import InvalidInputError

__all__ = ["IgnoreRules", "is_ignored", "parse_patterns", "read_rules"]

# Ignore rules are git's own algorithm, applied folder by folder while walking: for a path
# (relative to the folder of the ignore file), the last pattern that matches decides; an
# excluded folder is not entered. Patterns are translated to full-match regular expressions.
# (pathspec's GitIgnoreSpec was tried first: its regexes match a path *or anything below it*
# and rank file patterns over folder patterns, which is right for checking whole file paths but
# wrong for checking folders one level at a time: `*` + `!*.txt` + `!*/` lost nested .txt files,
# and `!logs/` re-included `logs/a.log`. tests/workflows/test_seed.py compares with git
# itself.)

_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "digit": "0-9",
    "lower": "a-z",
    "space": "\\s",
    "upper": "A-Z",
    "xdigit": "0-9a-fA-F",
    "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
}


@dataclass(frozen=True)
class IgnorePattern:
    """One gitignore line: its regex, and how it applies."""

    regex: re.Pattern[str]
    negate: bool  # "!pattern": re-include
    dir_only: bool  # "pattern/": folders only
    basename: bool  # no "/" inside: matches the last part of the path, at any depth


def _translate_bracket(seg: str, start: int) -> tuple[str, int] | None:
    """Translate ``[...]`` starting at ``seg[start]``; None when it is not closed."""
    i = start + 1
    negate = i < len(seg) and seg[i] in "!^"
    if negate:
        i += 1
    parts: list[str] = []
    first = True
    while i < len(seg):
        c = seg[i]
        if c == "]" and not first:
            body = "".join(parts)
            return ("[^/" + body + "]" if negate else "[" + body + "]"), i + 1
        first = False
        if c == "[" and seg.startswith("[:", i):
            close = seg.find(":]", i + 2)
            if close != -1 and seg[i + 2 : close] in _POSIX_CLASSES:
                parts.append(_POSIX_CLASSES[seg[i + 2 : close]])
                i = close + 2
                continue
        if c == "\\" and i + 1 < len(seg):
            parts.append(re.escape(seg[i + 1]))
            i += 2
            continue
        if c == "-" and parts and i + 1 < len(seg) and seg[i + 1] != "]":
            parts.append("-")
        else:
            parts.append(re.escape(c))
        i += 1
    return None


def _translate_segment(seg: str) -> str:
    """Translate one path part of a wildmatch pattern (no ``/`` in it)."""
    out: list[str] = []
    i = 0
    while i < len(seg):
        c = seg[i]
        if c == "\\" and i + 1 < len(seg):
            out.append(re.escape(seg[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            bracket = _translate_bracket(seg, i)
            if bracket is not None:
                out.append(bracket[0])
                i = bracket[1]
                continue
            out.append(re.escape(c))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _strip_trailing_spaces(line: str) -> str:
    """Git drops trailing spaces unless the last one is escaped with a backslash."""
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        backslashes = 0
        j = end - 2
        while j >= 0 and line[j] == "\\":
            backslashes += 1
            j -= 1
        if backslashes % 2:
            break
        end -= 1
    return line[:end]


def _parse_pattern(line: str) -> IgnorePattern | None:
    """Parse one line of an ignore file; None for blanks and comments."""
    line = _strip_trailing_spaces(line)
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    dir_only = line.endswith("/")
    if dir_only:
        line = line[:-1]
    if not line or line == "/":
        return None
    basename = "/" not in line
    parts = line.removeprefix("/").split("/")
    regex: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**" and not basename:
            regex.append(".*" if last else "(?:.*/)?")
            continue
        regex.append(_translate_segment(part))
        if not last:
            regex.append("/")
    return IgnorePattern(re.compile("".join(regex), re.DOTALL), negate, dir_only, basename)


def parse_patterns(lines: Sequence[str]) -> list[IgnorePattern]:
    """The patterns of an ignore file's lines (blank lines and comments skipped).

    >>> [p.negate for p in parse_patterns(["*.log", "# note", "!keep.log"])]
    [False, True]
    """
    out: list[IgnorePattern] = []
    for n, line in enumerate(lines):
        if n == 0:
            line = line.removeprefix("\ufeff")  # a UTF-8 byte-order mark, as git allows
        pattern = _parse_pattern(line)
        if pattern is not None:
            out.append(pattern)
    return out


@dataclass(frozen=True)
class IgnoreRules:
    """The patterns of one ignore file, applying to paths below ``base`` (``""`` = the root)."""

    base: str
    patterns: list[IgnorePattern]
    from_gitignore: bool


def read_rules(path: str, base: str, from_gitignore: bool, shown: str) -> IgnoreRules | None:
    """The rules of the ignore file at ``path`` (shown as ``shown`` in errors), applying below
    ``base``; None when it has no pattern. An unreadable file is an InvalidInputError."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise InvalidInputError(f"cannot read ignore file {shown!r}: {exc.strerror}") from exc
    patterns = parse_patterns(lines)
    return IgnoreRules(base, patterns, from_gitignore) if patterns else None


def _decide(rel: str, is_dir: bool, patterns: Sequence[IgnorePattern], decision: bool) -> bool:
    name = rel.rpartition("/")[2]
    for p in patterns:
        if p.dir_only and not is_dir:
            continue
        if p.regex.fullmatch(name if p.basename else rel):
            decision = not p.negate
    return decision


def is_ignored(
    rel: str, is_dir: bool, rules: Sequence[IgnoreRules], user: Sequence[IgnorePattern]
) -> bool:
    """Whether ``rel`` is excluded: the last matching pattern decides; deeper files come later,
    ``ignore=`` patterns last of all."""
    decision = False
    for r in rules:
        sub = rel[len(r.base) + 1 :] if r.base else rel
        decision = _decide(sub, is_dir, r.patterns, decision)
    return _decide(rel, is_dir, user, decision)
