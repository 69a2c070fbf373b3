"""``klavis-sandbox``: the command line face of `workflows`, made to be scripted
(``python -m workflows`` runs it too).

Conventions (those of gh and kubectl):

- stdout carries only the data asked for (``acquire`` prints the id alone, so
  ``ID=$(klavis-sandbox acquire filesystem)`` works); messages, hints and progress go to stderr,
  and ``-q``/``--quiet`` silences the messages (never the errors);
- ``--json`` prints the same data as JSON wherever a command prints data;
- the global options (``--base-url``, ``-q``) go before or after the command
  (``klavis-sandbox list --base-url URL``); given in both places, the later one wins;
- every command has a description and every option a help string, with its default
  (``tests/workflows/test_cli_grammar.py`` walks them all);
- exit status: 0 ok, 1 error, 2 usage, 130 interrupted, 141 stdout closed early, 143
  terminated (see :data:`EXIT_CODES`);
- nothing is overwritten without ``--force``.

The API key comes from ``KLAVIS_API_KEY`` (or a ``.env`` file), never from an argument, so it
does not show in the process list or the shell history.

* :mod:`._parser`: every command, its arguments and help (a command's module is imported
  when that command runs, never to build the parser: ``--help`` imports none of them);
* :mod:`._sandboxes` (``acquire``, ``list``, ``get``, ``exec``), :mod:`._workspace` (``seed``,
  ``template``, ``dump``), :mod:`._release` (``release``, ``reap``), :mod:`._demo`: the commands;
* :mod:`._output`: data on stdout, messages on stderr, the exit statuses;
* :mod:`._main`: running a command, its errors and signals turned into an exit status.
"""

from __future__ import annotations

from ._main import main, main_entry
from ._output import EXIT_CODES

__all__ = ["EXIT_CODES", "main", "main_entry"]
