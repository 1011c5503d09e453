#!/usr/bin/env bash
# Set up (if needed), then run the whole test suite in parallel on the default Vulkan driver.
# Extra arguments go to pytest, e.g. scripts/run-tests.sh -k rms_norm.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n auto "$@"
