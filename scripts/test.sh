#!/usr/bin/env bash
# Every test: install what is missing, build everything, run the C++ tests
# (CTest) and, when the Python module exists, its pytest suite; then the CPU
# suite again under ASan + UBSan and the fuzz targets (scripts/sanitize.sh).
# GPU tests skip with a message on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --python
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
ctest --preset default -j "$(nproc)"
if [[ -f python/CMakeLists.txt ]]; then
  scripts/python_tests.sh
fi
scripts/sanitize.sh  # the CPU suite under ASan + UBSan, and the fuzz targets for a bounded time
