"""Progress bars with ``tqdm.auto``: on in a terminal or notebook (for transfers of 1 MiB or
more), else off, or as forced."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator

__all__ = ["AUTO_MIN_BYTES", "PROGRESS_ENV", "Progress", "progress_bar", "progress_enabled"]

Progress = Callable[[int], None]


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    get_ipython = getattr(shell, "get_ipython", None)
    ip = get_ipython() if callable(get_ipython) else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


PROGRESS_ENV = "KLAVIS_PROGRESS"


AUTO_MIN_BYTES = 1024 * 1024
"""Below this many bytes a transfer shows no bar unless bars were asked for (``progress=True``,
``$KLAVIS_PROGRESS=1``): a one-file seed in a notebook drew two bars, 26 KB of cell output,
for an upload done in milliseconds."""


def progress_enabled(progress: bool | None, *, total_bytes: int | None = None) -> bool:
    """Whether to show bars: the explicit choice, else ``$KLAVIS_PROGRESS`` (``0``/``1``), else
    on for a terminal or a notebook when the transfer (``total_bytes``, when known) is at least
    :data:`AUTO_MIN_BYTES`."""
    if progress is not None:
        return progress
    setting = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return False
    if setting in ("1", "true", "yes", "on"):
        return True
    if total_bytes is not None and total_bytes < AUTO_MIN_BYTES:
        return False
    stream = sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)()) or _in_notebook()


@contextlib.contextmanager
def progress_bar(
    *, total: int | None, desc: str, unit: str = "B", progress: bool | None = None
) -> Iterator[Progress]:
    """Yield a callback ``update(n)``; draws a tqdm bar when progress is enabled.

    >>> with progress_bar(total=10, desc="demo", progress=False) as update:
    ...     update(10)
    """
    if not progress_enabled(progress, total_bytes=total if unit == "B" else None):
        yield lambda n: None
        return
    from tqdm.auto import tqdm

    scale = unit == "B"
    with tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=scale,
        unit_divisor=1024 if scale else 1000,
        leave=False,
    ) as bar:

        def update(n: int) -> None:
            bar.update(n)

        yield update
