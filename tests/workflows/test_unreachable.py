"""A service that cannot be reached: the error names what the user called and what was tried,
and the retries on the way are logged on the ``workflows`` logger only, never printed.

The "service" is a real port that refuses connections: bound but never listening, and held
for the whole test, so connecting is refused at once and no other test can take the port.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

import workflows
from tests.helpers import Face

ATTEMPTS = re.compile(r"\((\d+) attempts over \d+\.\d s\)")


@pytest.fixture
def closed_url() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_acquire_names_the_acquire_and_what_was_tried(face: Face, closed_url: str) -> None:
    with pytest.raises(workflows.ApiConnectionError) as caught:
        face.acquire(["git"], api_key="a-secret-key", base_url=closed_url)
    message = str(caught.value)
    assert message.startswith("acquire could not reach the API: ")
    assert f"POST {closed_url}/local-sandbox was not sent" in message
    assert f"GET {closed_url}/local-sandbox: ConnectError" in message
    found = ATTEMPTS.search(message)
    assert found is not None, message
    assert int(found.group(1)) > 1
    assert "a-secret-key" not in message
    assert workflows.reap(api_key="a-secret-key", base_url=closed_url) == []  # nothing recorded


def test_other_calls_say_how_many_attempts(face: Face, closed_url: str) -> None:
    sandbox_id = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(workflows.ApiConnectionError) as caught:
        face.attach(sandbox_id, api_key="k", base_url=closed_url)
    message = str(caught.value)
    assert message.startswith(f"could not reach GET {closed_url}/local-sandbox/{sandbox_id}: ")
    assert ATTEMPTS.search(message), message


# In a fresh interpreter: pytest's own logging capture would hide what a user sees.
PROGRAM = textwrap.dedent(
    """
    import logging, sys
    import stamina
    from stamina.instrumentation import set_on_retry_hooks
    import workflows

    stamina.set_testing(True, attempts=3)  # no backoff: the hooks run all the same
    if sys.argv[2] == "logging":
        logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    if sys.argv[2] == "own-hook":  # an application's own stamina hook
        seen = []
        set_on_retry_hooks([lambda details: seen.append(details.name)])
    try:
        workflows.LocalSandbox.attach(
            "00000000-0000-4000-8000-000000000000", api_key="k", base_url=sys.argv[1]
        )
    except workflows.ApiConnectionError:
        print("refused")
    if sys.argv[2] == "own-hook":
        def flaky():
            raise ValueError
        try:
            stamina.retry(on=ValueError, attempts=2)(flaky)()
        except ValueError:
            print("own retries seen by its hook:", seen)
    """
)


def _run(closed_url: str, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, closed_url, mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_retries_print_nothing_when_logging_is_not_configured(closed_url: str) -> None:
    done = _run(closed_url, "plain")
    assert done.stdout == "refused\n"
    assert done.stderr == ""


def test_retries_go_to_the_workflows_logger(closed_url: str) -> None:
    done = _run(closed_url, "logging")
    lines = done.stderr.splitlines()
    retries = [line for line in lines if line.startswith("workflows INFO retry ")]
    assert len(retries) == 2, done.stderr  # three attempts: two retries
    assert "after ApiConnectionError: could not reach GET" in retries[0]
    assert not [line for line in lines if "stamina" in line], done.stderr


def test_an_applications_own_stamina_hooks_still_see_its_own_retries(closed_url: str) -> None:
    done = _run(closed_url, "own-hook")
    # its two retries (testing mode: 3 attempts), none of the library's
    assert done.stdout.splitlines() == [
        "refused",
        "own retries seen by its hook: ['__main__.flaky', '__main__.flaky']",
    ]
    assert done.stderr == ""
