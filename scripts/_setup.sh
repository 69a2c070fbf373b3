# Sourced by scripts/test, scripts/demo and scripts/bench: make .venv with the project installed.
# Idempotent and quick when nothing changed: reinstalls only when pyproject.toml changes.
# EXTRAS picks the extras (default dev: everything scripts/test needs; scripts/demo asks for
# emulator only, and a venv that has dev has it). MCP_SERVERS picks the MCP servers to install
# (default: every one; scripts/demo: the three it acquires).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KLAVIS_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${EXTRAS:-dev}"

quiet() { "$@" 2>&1 | grep -v -e '^WARNING: Location' -e 'is ignored: it is neither' || true; }
if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV with $("$PYTHON" --version)"
    # uv (from PyPI) installs in seconds what pip takes minutes for: measured on a 2-core
    # machine with other jobs on it, the emulator extra in 6 s with uv and 221 s with pip, the
    # dev extra in 13 s. The venv is made without pip (ensurepip took 15 s there), uv is put in
    # by the interpreter's own pip (22.3 or newer), and uv puts pip in (executions use it).
    "$PYTHON" -m venv --without-pip "$VENV"
    quiet "$PYTHON" -m pip --python "$VENV/bin/python" install --quiet --disable-pip-version-check uv
    if ! { [ -x "$VENV/bin/uv" ] && "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" pip; }; then
        "$VENV/bin/python" -m ensurepip --upgrade >/dev/null
    fi
fi
stamp_of() { echo "$VENV/.installed-$1-$( (cat "$ROOT/pyproject.toml"; echo "$1") | sha256sum | cut -c1-16)"; }
stamp="$(stamp_of "$EXTRAS")"
if [ ! -f "$stamp" ] && [ ! -f "$(stamp_of dev)" ]; then
    echo "==> installing klavis-sandbox[$EXTRAS] into $VENV"
    [ -x "$VENV/bin/uv" ] || quiet "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check uv
    if ! { [ -x "$VENV/bin/uv" ] \
        && "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" -e "$ROOT[$EXTRAS]"; }; then
        echo "(uv could not install it: pip does)"
        quiet "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[$EXTRAS]"
    fi
    "$VENV/bin/python" -c "import workflows, klavis_emulator, klavis_sandbox_client" \
        || { echo "installation failed" >&2; exit 1; }
    rm -f "$VENV"/.installed-"$EXTRAS"-*
    touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
# The MCP servers the emulator hosts, into the per-user tools folder ($KLAVIS_EMULATOR_TOOLS_DIR
# or ~/.cache/klavis-emulator): an npm tree each for filesystem, localmemory, code-runner,
# desktop-commander and playwright (needs Node.js >= 18), a venv each for terminal, excel, word,
# powerpoint, arxiv, pdf-tools and poste_email_toolathlon (the last two with a Python 3.12 if
# the machine has one), four at a time. Idempotent, ~0.5 s when already done; see
# klavis_emulator/_mcp/setup.py for the measurements. The emulator installs a missing server
# on first need anyway; installing here makes the first use fast and a failure loud.
# scripts/demo goes on when they cannot be installed (no Node.js: the demo seeds and dumps
# without calling a tool); scripts/test does not.
if ! klavis-emulator setup -q ${MCP_SERVERS:+--only "$MCP_SERVERS"}; then
    if [ "${MCP_SERVERS_OPTIONAL:-0}" = 1 ]; then
        echo "warning: the emulator's MCP servers are not installed (see above); going on" >&2
    else
        exit 1
    fi
fi
