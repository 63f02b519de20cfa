#!/usr/bin/env bash
# Format and lint with the pinned ruff.   bash format.sh          fix in place
#                                          bash format.sh --check  check only (CI)
set -euo pipefail
cd "$(dirname "$0")"
RUFF_VERSION=0.8.6
if ! python3 -m ruff --version 2>/dev/null | grep -qx "ruff $RUFF_VERSION"; then
  python3 -m pip install -q "ruff==$RUFF_VERSION"
fi
if [ "${1:-}" = "--check" ]; then
  python3 -m ruff format --check .
  python3 -m ruff check .
else
  python3 -m ruff format .
  python3 -m ruff check --fix .
fi
