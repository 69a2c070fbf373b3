"""Contract tests: schemathesis drives every operation of openapi.yaml against the emulator.

Each operation gets the examples, coverage and fuzzing phases (bounded), and every answer is
checked: no server error, a documented status code, the documented content type, headers
and body schema. Most generated cases are pointed at live sandboxes of this test's own
emulator (a shared one seeded with uploads and a finished execution, or a fresh one for
release and reset), so the success paths are exercised too, not only the 404s.
"""

from __future__ import annotations

import io
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance

from klavis_emulator import EmulatorConfig, EmulatorServer

Case = schemathesis.Case[Any]

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "schemathesis-contract-key"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}

CONFIG = schemathesis.Config.from_dict(
    {
        "phases": {
            "examples": {"enabled": True, "fill-missing": True},
            "coverage": {"enabled": True},
            "fuzzing": {"enabled": True},
            "stateful": {"enabled": False},
        },
        "generation": {
            "max-examples": 20,
            "mode": "all",
            # Like the service (FastAPI), the emulator ignores query parameters it does not
            # know; they are not a contract violation.
            "allow-extra-parameters": True,
        },
        "auth": {"openapi": {"HTTPBearer": {"bearer": TOKEN}}},
    }
)
schema = schemathesis.openapi.from_path(ROOT / "openapi.yaml", config=CONFIG)

# Checks left out, and why:
# - ignored_auth: every bearer token is its own tenant by design (like a fresh account on the
#   real service), so a made-up token is accepted and answers 200/404 rather than 401. Missing
#   and empty tokens do answer 401 (tests/emulator/test_auth.py).
# - positive_data_acceptance: schema-valid input still meets documented 4xx answers that
#   depend on state the schema cannot express (409 before an upload, 400 for a sandbox that
#   does not hold the server, 400 for execution names with path separators).
EXCLUDED_CHECKS = [ignored_auth, positive_data_acceptance]


def _tar_gz(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass
class Target:
    """The emulator under test and its prepared sandboxes."""

    server: EmulatorServer
    http: httpx.Client
    shared: str

    def fresh(self) -> str:
        """A new live sandbox holding every server."""
        response = self.http.post("/local-sandbox", json={"server_names": "ALL"})
        assert response.status_code == 201, response.text
        sandbox_id: str = response.json()["local_sandbox_id"]
        return sandbox_id


def _put(http: httpx.Client, url_path: str, body: dict[str, Any] | None, archive: bytes) -> None:
    for region in ("us", "asia"):
        response = http.post(url_path, params={"region": region}, json=body)
        assert response.status_code == 200, response.text
        put = httpx.put(
            response.json()["upload_url"],
            content=archive,
            headers={"Content-Type": "application/gzip"},
            timeout=30,
        )
        assert put.status_code == 200, put.text


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """A seeded emulator: uploads for the workspace and executions, one finished execution."""
    data_dir = tmp_path_factory.mktemp("schemathesis")
    with (
        EmulatorServer(
            EmulatorConfig(data_dir=data_dir, confine_executions=False, execution_timeout=30)
        ) as server,
        httpx.Client(base_url=server.base_url, headers=HEADERS, timeout=30) as http,
    ):
        prepared = Target(server=server, http=http, shared="")
        shared = prepared.fresh()
        prepared.shared = shared
        base = f"/local-sandbox/{shared}"
        _put(http, f"{base}/upload-url", None, _tar_gz({"hello.txt": "hello"}))
        script = _tar_gz({"main.py": "print('hello from main.py')\n"})
        for name in ("done", "run1"):
            _put(http, f"{base}/execution-upload-url", {"execution_name": name}, script)
        assert http.post(f"{base}/execute", json={"execution_name": "done"}).status_code == 200
        tenant = server.state.get(_tenant(), shared).tenant
        assert server.state.wait_for_execution(tenant, shared, "done") == "completed"
        yield prepared


def _tenant() -> str:
    from klavis_emulator._state import tenant_for_token

    return tenant_for_token(TOKEN)


def _choice(case: Case, salt: str) -> int:
    """A number 0..3 derived from the generated case (stable under replay and shrinking)."""
    material = repr((salt, case.path_parameters, case.query, case.body))
    return zlib.crc32(material.encode("utf-8", "surrogatepass")) % 4


# Extra headers are generated too (allow-extra-parameters); these ones are about the HTTP
# framing itself and make uvicorn's protocol layer answer its own plain-text 400 before the
# application sees the request ("Content-Length: A"), which no API contract describes.
FRAMING_HEADERS = frozenset(
    {
        "connection",
        "content-length",
        "expect",
        "host",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


def _aim(case: Case, target: Target) -> None:
    """Point most cases at live sandboxes and known execution names."""
    if case.headers:
        for name in [name for name in case.headers if name.lower() in FRAMING_HEADERS]:
            del case.headers[name]
    params = case.path_parameters or {}
    key = "local_sandbox_id" if "local_sandbox_id" in params else "sandbox_id"
    if key in params and _choice(case, "sandbox") != 0:
        destructive = case.method.upper() == "DELETE" or case.path.endswith("/reset")
        params[key] = target.fresh() if destructive else target.shared
    name = "run1" if case.path.endswith("/execute") else "done"
    if _choice(case, "name") != 0:
        if isinstance(case.query, dict) and isinstance(case.query.get("execution_name"), str):
            case.query["execution_name"] = name
        if isinstance(case.body, dict) and isinstance(case.body.get("execution_name"), str):
            case.body["execution_name"] = name


def test_every_operation_is_covered() -> None:
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) == 19


@schema.parametrize()
@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_contract(case: Case, target: Target) -> None:
    _aim(case, target)
    case.call_and_validate(
        base_url=target.server.base_url,
        excluded_checks=EXCLUDED_CHECKS,
        timeout=30,
    )
