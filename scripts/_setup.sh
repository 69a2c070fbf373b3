# Sourced by scripts/test, scripts/demo and scripts/bench: make .venv with everything installed.
# Idempotent and quick when nothing changed: reinstalls only when pyproject.toml changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KLAVIS_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV with $("$PYTHON" --version)"
    "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.installed-$( (cat "$ROOT/pyproject.toml"; echo "${EXTRAS:-dev}") | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "==> installing klavis-sandbox[${EXTRAS:-dev}] into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[${EXTRAS:-dev}]" 2>&1 | grep -v '^WARNING: Location' || true
    "$VENV/bin/python" -c "import workflows, klavis_emulator, klavis_sandbox_client" \
        || { echo "installation failed" >&2; exit 1; }
    rm -f "$VENV"/.installed-*
    touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
# The MCP servers the emulator hosts (every one of its catalog): one npm ci for filesystem,
# localmemory, code-runner, desktop-commander and playwright (needs Node.js >= 18), a venv each
# for terminal, excel, word, powerpoint, arxiv, pdf-tools and poste_email_toolathlon (the last
# two with a Python 3.12 if the machine has one). Idempotent, ~0.5 s when already done; on a
# fresh tools dir several minutes (see
# klavis_emulator/_mcp/setup.py for the measurements). scripts/demo does not need them and goes
# on without; scripts/test does.
if ! klavis-emulator setup -q; then
    if [ "${MCP_SERVERS_OPTIONAL:-0}" = 1 ]; then
        echo "warning: the emulator's MCP servers are not installed (see above); going on" >&2
    else
        exit 1
    fi
fi
