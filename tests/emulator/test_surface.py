"""The emulator's public surface: what users use, and every type a public signature names can
be imported from `klavis_emulator`."""

from __future__ import annotations

import klavis_emulator
from tests.helpers import public_callables, types_named_by

_BACKEND = "EmulatorState"
"""``EmulatorServer.state``: the backend, exported for tests and other modules; the records
its methods return are the emulator's internals, kept in ``_state`` and ``_signing``."""


def test_the_surface_is_what_users_use() -> None:
    """Serving, configuring and confinement; no internal records, signers or name lists
    (they grew into ``__all__`` one feature at a time before)."""
    assert set(klavis_emulator.__all__) == {
        "EmulatorServer",
        "EmulatorConfig",
        "create_app",
        "default_data_dir",
        "CONTROL_TOKEN_HEADER",
        "ArchiveLimits",
        "Clock",
        "ManualClock",
        "OffsetClock",
        "SystemClock",
        "FaultSettings",
        "EmulatorState",
        "Confinement",
        "ConfinementError",
        "detect_confinement",
        "EmulatorExtraMissing",
    }
    assert len(klavis_emulator.__all__) == len(set(klavis_emulator.__all__))


def test_every_type_in_a_public_signature_is_exported() -> None:
    missing = {
        f"{where}: {name}"
        for where, fn in public_callables(klavis_emulator)
        if not where.startswith(f"{_BACKEND}.")
        for name in types_named_by(fn, "klavis_emulator")
        if name not in klavis_emulator.__all__
    }
    assert not missing, sorted(missing)


def test_the_backend_names_exported_types_or_its_own_records() -> None:
    from klavis_emulator import _signing, _state

    internal = set(_state.__all__) | set(_signing.__all__)  # records, signed URLs
    elsewhere = {
        f"{where}: {name}"
        for where, fn in public_callables(klavis_emulator)
        if where.startswith(f"{_BACKEND}.")
        for name in types_named_by(fn, "klavis_emulator")
        if name not in klavis_emulator.__all__ and name not in internal
    }
    assert not elsewhere, sorted(elsewhere)


def test_the_walk_sees_the_state_and_the_server() -> None:
    walked = dict(public_callables(klavis_emulator))
    assert "SandboxRecord" in types_named_by(walked["EmulatorState.find_live"], "klavis_emulator")
    assert "EmulatorConfig" in types_named_by(walked["EmulatorServer.__init__"], "klavis_emulator")
    assert "EmulatorState" in types_named_by(walked["EmulatorServer.state"], "klavis_emulator")


def test_the_missing_extra_check_knows_every_module_of_the_emulator_extra() -> None:
    """A dependency added to the ``emulator`` extra must be in ``EXTRA_MODULES``, or an install
    without it gets a traceback instead of the one line naming the extra (``mcp`` is left
    out on purpose: the ``mcp`` extra brings a 1.x that the library uses on its own; ``uv``
    too: setup builds the servers' venvs with pip without it)."""
    import importlib.metadata
    import re

    from klavis_emulator._extra import EXTRA_MODULES

    requirements = importlib.metadata.requires("klavis-sandbox") or []
    emulator_extra = re.compile(r"extra\s*==\s*[\"']emulator[\"']")
    names = {re.split(r"[<>=!~\[ ;]", r)[0] for r in requirements if emulator_extra.search(r)}
    modules = {name.lower().replace("-", "_") for name in names} - {"mcp", "uv"}
    assert {"fastapi", "psutil", "aiosmtpd"} <= modules
    assert modules <= set(EXTRA_MODULES)
