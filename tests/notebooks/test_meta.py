"""Cheap checks of the stored tutorial notebooks (no kernel; nbval runs them, see notebooks/).

Every notebook is stored with the outputs of a top-to-bottom run, holds no secret in any output,
never calls ``asyncio.run``, and ends by showing that nothing is left acquired.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
EXPECTED = ["01-quickstart", "02-generated-client", "03-seed-and-round-trip", "04-bulk"]
EXPECTED += ["05-execution", "06-mcp-agent", "07-reliability", "08-benchmark-pool"]
EXPECTED += ["09-agent-beyond-files"]
IGNORE_TAG = "nbval-ignore-output"

# What must never appear in a stored output: a bearer token or Authorization header, a
# signed URL's signature or expiry, the keys the notebooks run with, an object's address.
SECRETS = {
    "bearer token": re.compile(r"\bBearer\s+\S", re.IGNORECASE),
    "Authorization header": re.compile(r"Authorization", re.IGNORECASE),
    "signed-URL signature": re.compile(r"signature=", re.IGNORECASE),
    "signed-URL expiry": re.compile(r"[?&]expires=", re.IGNORECASE),
    "storage URL": re.compile(r"/_storage/"),
    "API key": re.compile(r"demo-key|sk-[A-Za-z0-9]{8,}"),
    "object address": re.compile(r" at 0x[0-9a-fA-F]+"),
}


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def code_cells(notebook: dict[str, Any]) -> list[dict[str, Any]]:
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]


def source(cell: dict[str, Any]) -> str:
    text = cell["source"]
    return "".join(text) if isinstance(text, list) else str(text)


def output_texts(cell: dict[str, Any]) -> list[str]:
    """Every text an output of the cell holds (streams, text/* data, error messages)."""
    texts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            texts.append("".join(out["text"]) if isinstance(out["text"], list) else out["text"])
        elif out["output_type"] in ("execute_result", "display_data"):
            for mime, data in out.get("data", {}).items():
                if mime.startswith("text/") or mime.endswith("json"):
                    texts.append("".join(data) if isinstance(data, list) else json.dumps(data))
        elif out["output_type"] == "error":
            texts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return texts


def test_the_expected_notebooks_exist() -> None:
    assert set(EXPECTED) <= {p.stem for p in PATHS}


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_stored_with_the_outputs_of_one_top_to_bottom_run(path: Path) -> None:
    cells = code_cells(load(path))
    counts = [cell["execution_count"] for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), "re-run it with scripts/notebooks"
    assert all(cell.get("outputs") for cell in cells[:1] + cells[-1:])
    for cell in cells:
        assert not any(out["output_type"] == "error" for out in cell.get("outputs", []))
        assert "execution" not in cell.get("metadata", {}), "timings are not stored"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_no_output_holds_a_secret(path: Path) -> None:
    for number, cell in enumerate(code_cells(load(path)), start=1):
        for text in output_texts(cell):
            for what, pattern in SECRETS.items():
                assert not pattern.search(text), f"code cell {number} shows a {what}"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_no_asyncio_run(path: Path) -> None:
    for cell in code_cells(load(path)):
        assert "asyncio.run(" not in source(cell), "use top-level await in a notebook"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_outputs_are_stable_text(path: Path) -> None:
    """No progress-bar widgets; output comparison switched off only for a plot."""
    for number, cell in enumerate(code_cells(load(path)), start=1):
        mimes = {m for out in cell.get("outputs", []) for m in out.get("data", {})}
        assert "application/vnd.jupyter.widget-view+json" not in mimes, (
            f"code cell {number} draws a widget (a tqdm bar?): pass progress=False"
        )
        if IGNORE_TAG in cell.get("metadata", {}).get("tags", []):
            assert "image/png" in mimes, f"code cell {number}: {IGNORE_TAG} is for plots only"


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_runs_standalone_and_ends_with_everything_released(path: Path) -> None:
    cells = code_cells(load(path))
    first, last = source(cells[0]), source(cells[-1])
    assert "KLAVIS_API_KEY" in first
    assert "EmulatorServer" in first
    assert "emulator.stop()" in last
    assert "sandboxes still held: 0" in "".join(output_texts(cells[-1]))
    everything = "\n".join(source(cell) for cell in cells)
    releases = r"\.release\(|bulk_release\(|release_local_sandbox|\breap\(|with .*\.acquire\("
    releases += r"|with .*SandboxPool\("
    assert re.search(releases, everything)


def test_the_sanitize_file_is_read_as_nbval_reads_it() -> None:
    text = (NOTEBOOKS / "sanitize.cfg").read_text(encoding="utf-8")
    pairs = re.findall(r"^regex: (.*)$\n^replace: (.*)$", text, flags=re.MULTILINE)
    assert len(pairs) == text.count("\nregex: ")
    patterns = [re.compile(regex) for regex, _ in pairs]
    samples = [
        "0dfa2ec3-300b-456a-bb9d-9fa540ca6004",
        "http://127.0.0.1:43723/git/mcp/",
        "2026-11-22T07:12:26.637465+00:00",
    ]
    for sample in samples:
        assert any(p.search(sample) for p in patterns), sample


def sanitized(text: str) -> str:
    """``text`` after every pattern of sanitize.cfg, applied in file order as nbval does."""
    config = (NOTEBOOKS / "sanitize.cfg").read_text(encoding="utf-8")
    for regex, replace in re.findall(r"^regex: (.*)$\n^replace: (.*)$", config, flags=re.MULTILINE):
        text = re.sub(regex, replace, text)
    return text


@pytest.mark.parametrize(
    "host",
    [
        "/tmp/klavis-emulator-m5s8sa87/workspaces/086c479c-ef4f-44d7-a4ae-5634d50a8511",
        "/private/var/folders/x1/T/klavis-emulator-q/workspaces/086c479c-ef4f-44d7-a4ae-5634d50a8511",
    ],
)
def test_an_unconfined_workspace_reads_as_the_confined_one(host: str) -> None:
    """MCP servers without bubblewrap see the workspace's host folder; confined ones see /data."""
    for template in ("Successfully wrote to {}/src/greet.py", "Allowed directories:\n{}"):
        assert sanitized(template.format(host)) == sanitized(template.format("/data"))
    assert sanitized("/data/src/greet.py") == "/data/src/greet.py"


def test_commit_ids_are_sanitized_but_not_sha256_digests() -> None:
    commit = "Changes committed successfully with hash 682f5790dd6dfb115209454692b87b0d4b625cb6"
    assert sanitized(commit) == "Changes committed successfully with hash <SHA>"
    digest = "c49ea39d9524b772e81efaf428626b5e08378a0a702033b21d47cdc2e5610e2c"
    assert sanitized(digest) == digest
