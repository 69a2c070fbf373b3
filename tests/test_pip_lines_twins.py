"""pip's logical lines, read twice by design: by the library before it sends a requirements file
(``workflows._execution_input``) and by the emulator before it installs one
(``klavis_emulator._exec.requirements``), which may not import each other. These tests hold the
two to the same answers, so that neither drifts alone (the emulator's had kept pip's quadratic
comment regex after the library's was made linear)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from klavis_emulator._exec import requirements as emulator
from workflows import _execution_input as library

# the characters pip's rules turn on: whitespace (unicode's too), comments, continuations
_TEXT = st.text(alphabet=" \t\u00a0\u3000#ab=\\\n\r", max_size=40)


@given(_TEXT)
def test_the_emulator_and_the_library_read_the_same_logical_lines(text: str) -> None:
    assert emulator._logical_lines(text) == library._logical_lines(text)


# a regression here runs for hours (pip's comment regex backtracks over each run of spaces:
# 40,000 took 17 s), the timeout makes it a failure; it passes in well under a second
@pytest.mark.timeout(60)
def test_the_emulator_reads_a_long_run_of_spaces_in_one_pass(tmp_path: Path) -> None:
    spaces = " " * (200 * 1024)  # four runs: under the 1 MiB the emulator reads
    text = f"{spaces}\nhttpx{spaces}# pinned{spaces}\n{spaces}attrs\n"
    assert emulator.check_requirements(text.encode(), tmp_path, "/X") == "httpx\nattrs\n"
