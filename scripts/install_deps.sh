#!/usr/bin/env bash
# Installs what attnkit needs to build and test that is not already present:
# Debian packages (compiler, CMake, the libraries) and, with --python, the PyPI
# packages of the Python module's tests. Idempotent; quiet when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(g++ cmake ninja-build pkg-config git
                 libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libfmt-dev libhwy-dev libdlpack-dev
                 libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "attnkit: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ "${1:-}" == "--python" && -f python/requirements-test.txt ]]; then
  python3 -m pip install -q -r python/requirements-test.txt
fi
