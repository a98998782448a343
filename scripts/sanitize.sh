#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer
# (clang, the `sanitize` preset: every report is fatal), the CLI bad-input
# matrix against the sanitized CLI, then every libFuzzer target for
# FUZZ_SECONDS (default 10) each. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds="${FUZZ_SECONDS:-10}"
cmake --preset sanitize >/dev/null
cmake --build --preset sanitize -j "$(nproc)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
# install_consumer builds an unsanitized consumer. The *GpuInputs tests check
# the GPU tests' inputs against fp64 oracles on the host (their library calls
# run under the sanitizers in the CPU tests of the same backends):
# SolGpuInputs took 221 s of the sanitized run on 2 cores (2026-12-07), 10 s
# unsanitized, where the plain ctest still runs them.
ctest --preset sanitize -j "$(nproc)" -E '^install_consumer$|GpuInputs\.'
if [[ -f build/python/attnkit/__init__.py ]]; then
  ATTNKIT_CLI="$PWD/build-sanitize/src/cli/attnkit" PYTHONPATH=build/python \
    python3 -m pytest -q -p no:cacheprovider python/tests/test_cli_bad_inputs.py
fi
scripts/fuzz.sh "$fuzz_seconds"
