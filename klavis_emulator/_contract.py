"""The contract the emulator serves, as it carries it: ``_openapi.json``.

``_openapi.json`` is ``openapi.yaml`` written as JSON by ``scripts/regenerate`` (``--check``
fails when it is stale; ``tests/contract/test_contract.py`` holds the two equal): the
standard library reads it in under a millisecond, where PyYAML took 13 ms for the YAML. What
the emulator takes from the contract rather than writing out again: the data documents'
models (:mod:`._server_data`, built by :mod:`._contract_models`) and the names of the local
sandbox's servers (:data:`._state.LOCAL_SERVER_NAMES`).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Final

__all__ = ["contract_enum", "contract_schemas"]

_CONTRACT: Final = Path(__file__).with_name("_openapi.json")


@functools.cache
def _document() -> dict[str, Any]:
    with _CONTRACT.open("rb") as file:
        document: dict[str, Any] = json.load(file)
    return document


def contract_schemas() -> dict[str, Any]:
    """The contract's ``components/schemas``, by name (read once; do not change them)."""
    schemas: dict[str, Any] = _document()["components"]["schemas"]
    return schemas


def contract_enum(schema: str) -> tuple[str, ...]:
    """The values of the contract's enum schema ``schema``, in its order.

    >>> contract_enum("GCSRegion")
    ('us', 'asia')
    """
    values = contract_schemas()[schema]["enum"]
    return tuple(str(value) for value in values)
