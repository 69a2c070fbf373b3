"""The seed templates' cache, on real files: where it is, its permissions, atomic writes, the
bound on its size (least recently used removed first), leftovers of dead processes, and the
folders it refuses."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from workflows import ConfigurationError, SeedTemplate, SeedTemplateError
from workflows._template import CACHE_BYTES_ENV, DEFAULT_CACHE_BYTES, cache_folder
from workflows._template._cache import cache_limit


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_cache_is_private_and_holds_only_whole_archives(tmp_path: Path) -> None:
    template = SeedTemplate.from_mapping({"a.txt": "A"})
    folder = tmp_path / "cache" / "templates"  # $KLAVIS_SANDBOX_CACHE_DIR/templates
    assert template.path.parent == folder
    assert template.path.name == template.digest.removeprefix("sha256:") + ".tar.gz"
    assert _mode(folder) == 0o700
    assert _mode(template.path) == 0o600
    assert [p.name for p in folder.iterdir()] == [template.path.name]  # no partial file left


def test_a_cache_folder_readable_by_others_is_narrowed(tmp_path: Path) -> None:
    folder = tmp_path / "wide"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    assert cache_folder(folder) == folder
    assert _mode(folder) == 0o700


def test_a_cache_folder_that_is_a_link_or_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ConfigurationError, match="not a folder"):
        SeedTemplate.from_mapping({"a": "b"}, cache_dir=tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError, match="not a folder"):
        cache_folder(tmp_path / "file")
    assert list((tmp_path / "real").iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder of another user needs root")
def test_a_cache_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 12345, 12345)
    with pytest.raises(ConfigurationError, match="belongs to another user"):
        cache_folder(folder)


def test_the_least_recently_used_archives_go_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = SeedTemplate.from_mapping({"a.bin": os.urandom(20_000)})
    second = SeedTemplate.from_mapping({"b.bin": os.urandom(20_000)})
    os.utime(first.path, (1_000, 1_000))  # used long ago
    os.utime(second.path, (2_000, 2_000))
    first.read_bytes()  # a use makes it the most recent
    limit = first.size + second.size + 100
    monkeypatch.setenv(CACHE_BYTES_ENV, str(limit))
    third = SeedTemplate.from_mapping({"c.bin": os.urandom(20_000)})
    assert first.path.exists()
    assert not second.path.exists()  # the least recently used
    assert third.path.exists()
    with pytest.raises(SeedTemplateError, match="no longer in the cache"):
        second.read_bytes()
    monkeypatch.setenv(CACHE_BYTES_ENV, "0")
    fourth = SeedTemplate.from_mapping({"d": "d"})
    assert [p.name for p in fourth.path.parent.iterdir()] == [fourth.path.name]  # kept anyway


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache_limit() == DEFAULT_CACHE_BYTES
    monkeypatch.setenv(CACHE_BYTES_ENV, "1_000_000")
    assert cache_limit() == 1_000_000
    monkeypatch.setenv(CACHE_BYTES_ENV, "-1")
    with pytest.raises(ConfigurationError, match=CACHE_BYTES_ENV):
        cache_limit()


def test_partial_files_of_dead_processes_are_removed(tmp_path: Path) -> None:
    folder = cache_folder()
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = folder / f".partial-{done.stdout.strip()}-x.tmp"
    dead.write_bytes(b"half an archive")
    mine = folder / f".partial-{os.getpid()}-y.tmp"  # a store under way in this process
    mine.write_bytes(b"being written")
    template = SeedTemplate.from_mapping({"a": "b"})
    assert not dead.exists()
    assert mine.exists()
    assert template.path.exists()


def test_a_failed_store_leaves_nothing(tmp_path: Path) -> None:
    from workflows._template._cache import store

    folder = cache_folder()

    def fail(out: object) -> None:
        raise RuntimeError("the packer failed")

    with pytest.raises(RuntimeError):
        store(folder, fail)
    assert list(folder.iterdir()) == []
