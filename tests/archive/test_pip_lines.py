"""pip's logical lines (``klavis_archive._pip_lines``), read once for both sides: the library
before it sends a requirements file, the emulator before it installs one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from klavis_archive import pip_logical_lines, without_pip_comment
from klavis_emulator._exec import requirements as emulator


@given(st.text(alphabet=" \t\u00a0\u3000#ab=\\", max_size=16))
def test_comments_go_as_pips_regular_expression_takes_them(line: str) -> None:
    pip_rule = re.compile(r"(^|\s+)#.*$")  # pip's COMMENT_RE (pip/_internal/req/req_file.py)
    assert without_pip_comment(line).strip() == pip_rule.sub("", line).strip()


def test_continuations_join_and_each_line_keeps_its_first_number() -> None:
    text = "a \\\n  b # c\n\n  # only a comment\nd\\\n"
    assert pip_logical_lines(text) == [(1, "a   b"), (5, "d")]


# a regression here runs for hours (pip's comment regex backtracks over each run of spaces:
# 40,000 took 17 s), the timeout makes it a failure; it passes in well under a second
@pytest.mark.timeout(60)
def test_the_emulator_reads_a_long_run_of_spaces_in_one_pass(tmp_path: Path) -> None:
    spaces = " " * (200 * 1024)  # four runs: under the 1 MiB the emulator reads
    text = f"{spaces}\nhttpx{spaces}# pinned{spaces}\n{spaces}attrs\n"
    assert emulator.check_requirements(text.encode(), tmp_path, "/X") == "httpx\nattrs\n"
