#!/usr/bin/env bash
# The main job: install what is missing, build attnkit, and run `attnkit run`
# on the default problem on this machine (its GPU if it has one, else the CPU).
# Extra arguments go to `attnkit run` (e.g. --format json, --backend reference).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target attnkit_cli -j "$(nproc)"
exec build/src/cli/attnkit run "$@"
