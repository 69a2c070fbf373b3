"""``KLAVIS_API_KEY_FILE``: the key read from a file (for machines that get secrets as files, and
Ray clusters, whose ``runtime_env`` must never hold the key), after ``KLAVIS_API_KEY``, with the
checks of a secret file: real files, real modes, a real other owner where the test runs as root.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from workflows import ConfigurationError
from workflows._config import resolve_settings


def key_file(folder: Path, text: str = "sk-from-file\n", mode: int = 0o600) -> Path:
    path = folder / "klavis-key"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_key_comes_from_the_file_after_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KLAVIS_API_KEY_FILE", str(key_file(tmp_path)))
    assert resolve_settings().api_key.reveal() == "sk-from-file"  # the line break stripped
    monkeypatch.setenv("KLAVIS_API_KEY", "sk-from-env")
    assert resolve_settings().api_key.reveal() == "sk-from-env"
    assert resolve_settings("sk-arg").api_key.reveal() == "sk-arg"


def test_a_link_to_the_file_is_followed_as_a_kubernetes_secret_volume_needs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data = tmp_path / "..data"
    data.mkdir()
    key_file(data)
    (tmp_path / "key").symlink_to(data / "klavis-key")
    monkeypatch.setenv("KLAVIS_API_KEY_FILE", str(tmp_path / "key"))
    assert resolve_settings().api_key.reveal() == "sk-from-file"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda folder: folder / "missing", "cannot be read"),
        (lambda folder: folder, "not a regular file"),
        (lambda folder: key_file(folder, mode=0o622), "others may write (mode 622)"),
        (lambda folder: key_file(folder, "k" * 5000), "5000 bytes: more than 4096"),
        (lambda folder: key_file(folder, "sk one\n"), "contains a space"),
    ],
    ids=["missing", "a-folder", "writable-by-others", "too-large", "not-a-key"],
)
def test_a_bad_key_file_is_refused_naming_it_and_never_showing_its_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, make: object, message: str
) -> None:
    assert callable(make)
    path = make(tmp_path)
    monkeypatch.setenv("KLAVIS_API_KEY_FILE", str(path))
    with pytest.raises(ConfigurationError) as caught:
        resolve_settings()
    assert message in str(caught.value)
    assert "sk one" not in str(caught.value)


def test_a_fifo_is_refused_without_waiting_for_a_writer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fifo = tmp_path / "key"
    os.mkfifo(fifo)
    monkeypatch.setenv("KLAVIS_API_KEY_FILE", str(fifo))
    with pytest.raises(ConfigurationError, match="not a regular file"):
        resolve_settings()  # opened without blocking: hangs here if it waited for a writer


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = key_file(tmp_path)
    os.chown(path, 65534, 65534)  # nobody
    monkeypatch.setenv("KLAVIS_API_KEY_FILE", str(path))
    with pytest.raises(ConfigurationError, match=r"belongs to another user \(uid 65534\)"):
        resolve_settings()


def test_a_file_others_may_read_is_used_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = key_file(tmp_path, mode=0o644)
    monkeypatch.setenv("KLAVIS_API_KEY_FILE", str(path))
    with caplog.at_level(logging.WARNING, logger="workflows"):
        for _ in range(3):
            assert resolve_settings().api_key.reveal() == "sk-from-file"
    warned = [r.getMessage() for r in caplog.records if "other users may read" in r.getMessage()]
    assert len(warned) == 1
    assert "mode 644" in warned[0]
    assert "sk-from-file" not in caplog.text
