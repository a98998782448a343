#!/usr/bin/env bash
# Every test: install what is missing, build everything, run the C++ tests
# (CTest) and, when the Python module exists, its pytest suite; then the CPU
# suite again under ASan + UBSan and the fuzz targets (scripts/sanitize.sh).
# GPU tests skip with a message on machines without a GPU. Each phase prints
# the seconds since the start (CI's budget is 30 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
phase() { echo "== test.sh: $1 (at ${SECONDS}s)"; }
phase "dependencies"
scripts/install_deps.sh --python
phase "build"
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
phase "ctest"
ctest --preset default -j "$(nproc)"
if [[ -f python/CMakeLists.txt ]]; then
  phase "pytest"
  scripts/python_tests.sh
fi
phase "sanitize"
scripts/sanitize.sh  # the CPU suite under ASan + UBSan, and the fuzz targets for a bounded time
phase "done"
