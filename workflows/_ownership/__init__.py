"""What this user holds, across processes: which sandboxes, and how a leak is found and cured.

* :mod:`._registry`: what this process owns and is about to own (released at exit and on
  SIGTERM), the claims that keep two acquires from sharing one sandbox, the attempts in flight;
* :mod:`._ledger`: the per-user JSONL file every process records its acquires and releases in;
* :mod:`._reconcile`: deciding, without I/O, what an ambiguous acquire left behind;
* :mod:`._reap`: releasing what the ledger says is still held (``reap``, ``held_sandboxes``).

The flows import this package, so it does not import :mod:`._reap`, which runs flows (a
listing, a bulk release): the public surface imports reap from its module. The modules have no
``__all__`` of their own: the list below is what the rest of the library uses.
"""

from __future__ import annotations

from ._ledger import (
    AcquireAttempt,
    Ledger,
    LedgerEntry,
    default_ledger,
    process_running,
    state_folder,
)
from ._reconcile import AcquireDidNotHappen, adoptable, is_ambiguous, orphans
from ._registry import (
    Terminated,
    attempt_ended,
    claim,
    clear,
    disown,
    forget,
    in_flight,
    install_exit_handlers,
    ledger_of,
    new_attempt,
    own,
    own_detached,
    release_claim,
    unwind_on_sigterm,
)

__all__ = [
    # the registry: what this process owns, claims, and is about to own
    "Terminated",
    "attempt_ended",
    "claim",
    "clear",
    "disown",
    "forget",
    "in_flight",
    "install_exit_handlers",
    "ledger_of",
    "new_attempt",
    "own",
    "own_detached",
    "release_claim",
    "unwind_on_sigterm",
    # the ledger: what every process of this user recorded
    "AcquireAttempt",
    "Ledger",
    "LedgerEntry",
    "default_ledger",
    "state_folder",
    "process_running",
    # reconciling an ambiguous acquire
    "AcquireDidNotHappen",
    "adoptable",
    "is_ambiguous",
    "orphans",
]
