#!/usr/bin/env bash
# The Python module's tests, run against the module built in the main build
# tree (build/python/attnkit), so CI compiles attnkit once.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
if [[ ! -f "$build_dir/python/attnkit/__init__.py" ]]; then
  echo "python tests: $build_dir/python has no attnkit module (nanobind missing at configure time?)" >&2
  exit 1
fi
# The fidelity tests and the CLI bad-input matrix (test_cli_bad_inputs.py)
# also run `attnkit check` / `explain` / `run` of the same build.
if [[ -x "$build_dir/src/cli/attnkit" ]]; then
  export ATTNKIT_CLI="$(realpath "$build_dir/src/cli/attnkit")"
fi
PYTHONPATH="$build_dir/python" python3 -m pytest -q python/tests
