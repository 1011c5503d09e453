#!/usr/bin/env bash
# Set up (if needed), then run a parity run on the default adapter and write its HTML report.
# Extra arguments go to `parity run` (see `parity run --help`); the report lands in
# reports/latest/index.html unless --out says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/parity run --out reports/latest "$@"
