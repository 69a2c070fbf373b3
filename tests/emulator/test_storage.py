"""Signed storage URLs: HMAC over method, object and expiry; 403 when tampered with or
expired by the emulator's clock; 413 past the upload cap; streamed to disk."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest

from klavis_emulator import EmulatorConfig, EmulatorServer

MakeTarGz = Callable[[Mapping[str, bytes | str]], bytes]
GZIP = {"Content-Type": "application/gzip"}


def _acquire(client: httpx.Client) -> str:
    response = client.post("/local-sandbox", json={"server_names": ["git"]})
    assert response.status_code == 201
    sandbox_id: str = response.json()["local_sandbox_id"]
    return sandbox_id


def _replace_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    query.update(changes)
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.fixture
def own_emulator(tmp_path: Path) -> Iterator[EmulatorServer]:
    """An emulator of this test's own (its clock is moved, its upload cap is 1 MB)."""
    with EmulatorServer(
        EmulatorConfig(data_dir=tmp_path, max_upload_mb=1, signed_url_minutes=5)
    ) as server:
        yield server


@pytest.fixture
def own_client(own_emulator: EmulatorServer, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=own_emulator.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as http:
        yield http


def test_upload_url_shape(client: httpx.Client, emulator: EmulatorServer) -> None:
    sandbox_id = _acquire(client)
    data = client.post(f"/local-sandbox/{sandbox_id}/upload-url").json()
    assert data["expires_in_minutes"] == 30
    parts = urlsplit(data["upload_url"])
    assert f"{parts.scheme}://{parts.netloc}" == emulator.base_url
    assert parts.path.startswith("/_storage/upload/")
    assert sandbox_id in parts.path
    assert set(parse_qs(parts.query)) == {"expires", "signature"}


def test_tampered_urls_are_403(client: httpx.Client, make_tar_gz: MakeTarGz) -> None:
    sandbox_id = _acquire(client)
    url = client.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    other_id = _acquire(client)
    other_url = client.post(f"/local-sandbox/{other_id}/upload-url").json()["upload_url"]
    archive = make_tar_gz({"a.txt": "a"})
    expires = parse_qs(urlsplit(url).query)["expires"][0]
    signature = parse_qs(urlsplit(url).query)["signature"][0]
    flipped = ("0" if signature[0] != "0" else "1") + signature[1:]
    tampered = {
        "signature": _replace_query(url, signature=flipped),
        "expiry extended": _replace_query(url, expires=str(int(expires) + 3600)),
        "no signature": url.split("?")[0] + f"?expires={expires}",
        "no query": url.split("?")[0],
        "garbage signature": _replace_query(url, signature="not-hex"),
        "other object": other_url.split("?")[0] + "?" + url.split("?")[1],
        "asia object": url.replace("-us.tar.gz", "-asia.tar.gz"),
    }
    for case, bad_url in tampered.items():
        response = client.put(bad_url, content=archive, headers=GZIP)
        assert response.status_code == 403, (case, response.text)
        assert "signed" in response.json()["detail"] or "signature" in response.json()["detail"]
    # A PUT URL cannot be used to GET, and the genuine URL still works.
    assert client.get(url).status_code in (403, 405)
    assert client.put(url, content=archive, headers=GZIP).status_code == 200
    assert client.post(f"/local-sandbox/{sandbox_id}/initialize").status_code == 200


def test_download_url_cannot_be_reused_for_upload(client: httpx.Client) -> None:
    sandbox_id = _acquire(client)
    download = client.get(f"/local-sandbox/{sandbox_id}/dump").json()["download_url"]
    as_upload = download.replace("/_storage/download/", "/_storage/upload/")
    response = client.put(as_upload, content=b"\x1f\x8b", headers=GZIP)
    assert response.status_code == 403


def test_urls_expire_by_the_emulator_clock(
    own_client: httpx.Client, own_emulator: EmulatorServer, make_tar_gz: MakeTarGz
) -> None:
    sandbox_id = _acquire(own_client)
    upload = own_client.post(f"/local-sandbox/{sandbox_id}/upload-url").json()
    assert upload["expires_in_minutes"] == 5
    download = own_client.get(f"/local-sandbox/{sandbox_id}/dump").json()["download_url"]
    archive = make_tar_gz({"a.txt": "a"})

    advanced = own_client.post("/_emulator/clock/advance", json={"seconds": 4 * 60})
    assert advanced.status_code == 200
    assert own_client.put(upload["upload_url"], content=archive, headers=GZIP).status_code == 200
    assert own_client.get(download).status_code == 200

    own_emulator.state.clock.advance(61)  # type: ignore[attr-defined]
    expired_put = own_client.put(upload["upload_url"], content=archive, headers=GZIP)
    assert expired_put.status_code == 403
    assert "expired" in expired_put.json()["detail"]
    expired_get = own_client.get(download)
    assert expired_get.status_code == 403
    assert "expired" in expired_get.json()["detail"]
    # A fresh URL works again.
    fresh = own_client.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    assert own_client.put(fresh, content=archive, headers=GZIP).status_code == 200


def test_oversized_upload_is_413(
    own_client: httpx.Client, own_emulator: EmulatorServer, make_tar_gz: MakeTarGz
) -> None:
    sandbox_id = _acquire(own_client)
    url = own_client.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    too_big = b"\x1f\x8b" + bytes(1024 * 1024)
    response = own_client.put(url, content=too_big, headers=GZIP)
    assert response.status_code == 413
    assert "1048576 bytes" in response.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap is enforced while streaming
        for _ in range(20):
            yield bytes(64 * 1024)

    streamed = own_client.put(url, content=chunks(), headers=GZIP)
    assert streamed.status_code == 413
    # Nothing was stored: initialize has no archive to extract.
    assert own_client.post(f"/local-sandbox/{sandbox_id}/initialize").status_code == 409
    assert list((own_emulator.data_dir / "tmp").iterdir()) == []
    # A small upload to the same URL is fine.
    ok = own_client.put(url, content=make_tar_gz({"a": "a"}), headers=GZIP)
    assert ok.status_code == 200


def test_upload_needs_the_gzip_content_type(client: httpx.Client, make_tar_gz: MakeTarGz) -> None:
    sandbox_id = _acquire(client)
    url = client.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    archive = make_tar_gz({"a.txt": "a"})
    response = client.put(url, content=archive, headers={"Content-Type": "text/plain"})
    assert response.status_code == 400
    assert "application/gzip" in response.json()["detail"]
    assert client.post(f"/local-sandbox/{sandbox_id}/initialize").status_code == 409
    for content_type in ("application/gzip", "application/x-gzip"):
        ok = client.put(url, content=archive, headers={"Content-Type": content_type})
        assert ok.status_code == 200


def test_upload_to_a_released_sandbox_is_404(client: httpx.Client, make_tar_gz: MakeTarGz) -> None:
    sandbox_id = _acquire(client)
    url = client.post(f"/local-sandbox/{sandbox_id}/upload-url").json()["upload_url"]
    client.delete(f"/local-sandbox/{sandbox_id}")
    response = client.put(url, content=make_tar_gz({"a": "a"}), headers=GZIP)
    assert response.status_code == 404
    assert "no longer exists" in response.json()["detail"]


def test_signed_urls_survive_a_restart(tmp_path: Path, token: str, make_tar_gz: MakeTarGz) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with (
        EmulatorServer(EmulatorConfig(data_dir=tmp_path)) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http,
    ):
        sandbox_id = _acquire(http)
        path_and_query = (
            http.post(f"/local-sandbox/{sandbox_id}/upload-url")
            .json()["upload_url"]
            .removeprefix(server.base_url)
        )
    with (
        EmulatorServer(EmulatorConfig(data_dir=tmp_path)) as server,
        httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as http,
    ):
        put = http.put(path_and_query, content=make_tar_gz({"a": "a"}), headers=GZIP)
        assert put.status_code == 200
        assert http.post(f"/local-sandbox/{sandbox_id}/initialize").status_code == 200
