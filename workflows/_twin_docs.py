"""One source for the docstrings of the sync face and its async twin.

The async classes (:class:`~workflows.AsyncLocalSandbox`, :class:`~workflows.AsyncExecution`)
take the docstring of each method that behaves as its sync counterpart, adapted:
``LocalSandbox`` becomes ``AsyncLocalSandbox`` (``Execution``, ``AsyncExecution``), and in the
examples (``>>>`` and ``...`` lines) a call of a coroutine method gets its ``await``
(``(await sb.call_tool(...)).text`` where the result is used at once), ``with`` becomes
``async with``, and a ``for`` over an async generator ``async for``. So
``help(AsyncLocalSandbox.seed_directory)`` says everything ``help(LocalSandbox.seed_directory)``
does, and an edit of one is an edit of both. Methods whose async behaviour differs
(``acquire`` returns an awaitable, ``execute`` an async handle, ...) keep docstrings of their
own; ``tests/workflows/test_twin_docs.py`` checks that every method has one and that the
examples of the adapted ones are valid async code.

Hand-written rather than copied at import by a library: no documentation tool does this for
methods (``functools.wraps`` copies a docstring as is), and the rules are a few regular
expressions over docstrings this project writes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Collection, Iterable

__all__ = ["adapt_docstring", "share_docstrings"]

_RENAMES = (
    (re.compile(r"(?<![\w.])LocalSandbox\b|(?<=workflows\.)LocalSandbox\b"), "AsyncLocalSandbox"),
    (re.compile(r"(?<![\w.])Execution\b|(?<=workflows\.)Execution\b"), "AsyncExecution"),
)
_PROMPT = re.compile(r"^(\s*(?:>>>|\.\.\.) )(.*)$")
_CALL = re.compile(r"\b(sb|run|AsyncLocalSandbox)\.(\w+)\(")


def _close_paren(text: str, opening: int) -> int:
    """The index just after the parenthesis that closes the one at ``opening``."""
    depth = 0
    for i in range(opening, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _await_calls(code: str, coroutines: Collection[str], iterators: Collection[str]) -> str:
    """``code`` with an ``await`` before each call of a method named in ``coroutines``, and
    ``async`` before a ``with`` or a ``for`` over a call of one named in ``iterators``."""
    out: list[str] = []
    pos = 0
    for match in _CALL.finditer(code):
        if match.start() < pos or match.group(2) not in coroutines:
            continue
        end = _close_paren(code, match.end() - 1)
        call = code[match.start() : end]
        used_at_once = end < len(code) and code[end] in ".["
        out.append(code[pos : match.start()])
        out.append(f"(await {call})" if used_at_once else f"await {call}")
        pos = end
    out.append(code[pos:])
    code = "".join(out)
    over_async = any(m.group(2) in iterators for m in _CALL.finditer(code.split(":")[0]))
    if code.startswith("with ") or (code.startswith("for ") and over_async):
        code = f"async {code}"
    return code


def adapt_docstring(doc: str, coroutines: Collection[str], iterators: Collection[str] = ()) -> str:
    """The async twin's version of a sync docstring (see the module docs): ``coroutines`` and
    ``iterators`` name the async twin's coroutine and async generator methods.

    >>> adapt_docstring('>>> sb.dump()["a.txt"]', {"dump"})
    '>>> (await sb.dump())["a.txt"]'
    """
    for pattern, name in _RENAMES:
        doc = pattern.sub(name, doc)
    lines = []
    for line in doc.splitlines(keepends=True):
        prompt = _PROMPT.match(line.rstrip("\n"))
        if prompt is not None:
            ending = "\n" if line.endswith("\n") else ""
            code = _await_calls(prompt.group(2), coroutines, iterators)
            line = prompt.group(1) + code + ending
        lines.append(line)
    return "".join(lines)


def share_docstrings(sync_class: type, async_class: type, names: Iterable[str]) -> None:
    """Give each method ``names`` of ``async_class`` the adapted docstring of ``sync_class``'s."""
    members = inspect.getmembers(async_class)
    coroutines = {name for name, member in members if inspect.iscoroutinefunction(member)}
    iterators = {name for name, member in members if inspect.isasyncgenfunction(member)}
    for name in names:
        source = inspect.getdoc(getattr(sync_class, name))
        if not source:
            raise TypeError(f"{sync_class.__name__}.{name} has no docstring to share")
        member = vars(async_class)[name]
        function = member.__func__ if isinstance(member, classmethod | staticmethod) else member
        function.__doc__ = adapt_docstring(source, coroutines, iterators)
