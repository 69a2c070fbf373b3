"""pip's logical lines of a requirements file: what an execution's archive carries is read by
both sides, the library before it sends one (``workflows._execution_input``) and the emulator
before it installs one (``klavis_emulator._exec.requirements``), which may not import each
other. Written once here, below both: written twice, the two had drifted (the emulator's kept
pip's quadratic comment regex after the library's was made linear).

Hand-written rather than pip's own reader (``pip._internal.req.req_file``): pip has no public
API, and its comment regex is quadratic (below).
"""

from __future__ import annotations

__all__ = ["pip_logical_lines", "without_pip_comment"]


def without_pip_comment(line: str) -> str:
    """``line`` without its comment, by pip's rule (``(^|\\s+)#.*$``: a ``#`` at the start or
    after whitespace starts one), in one pass: the regular expression is quadratic (it
    backtracks over each run of whitespace: 40,000 spaces took 17 s, and the emulator reads
    up to 1 MiB).

    >>> without_pip_comment("httpx==0.28  # pinned"), without_pip_comment("a#b")
    ('httpx==0.28  ', 'a#b')
    """
    at = line.find("#")
    while at > 0 and not line[at - 1].isspace():
        at = line.find("#", at + 1)
    return line if at < 0 else line[:at]


def pip_logical_lines(text: str) -> list[tuple[int, str]]:
    """pip's logical lines with their first line number: ``\\`` joins lines, comments go,
    blank lines go.

    >>> pip_logical_lines("httpx \\\\\\n  ==0.28  # pinned\\n\\n# a comment\\nattrs\\n")
    [(1, 'httpx   ==0.28'), (5, 'attrs')]
    """
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        if raw.endswith("\\"):
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        line = without_pip_comment("".join(pending)).strip()
        pending = []
        if line:
            lines.append((start, line))
    if pending and (line := without_pip_comment("".join(pending)).strip()):
        lines.append((start, line))
    return lines
