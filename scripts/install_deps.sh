#!/usr/bin/env bash
# Installs what attnkit needs to build and test that is not already present:
# Debian packages (compiler, CMake, the libraries) and, with --python, the PyPI
# packages of the Python module's tests. Idempotent; quiet when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(g++ cmake ninja-build pkg-config git
                 libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libfmt-dev libhwy-dev libdlpack-dev
                 libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin
                 clang-14 libclang-rt-14-dev libomp-14-dev)  # the sanitize preset: ASan/UBSan tests, libFuzzer
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

# The cuDNN frontend's C++ headers (header-only; the cudnn backend compiles
# against them and opens libcudnn at run time). PyPI's nvidia-cudnn-frontend
# wheel ships them; only its include/ is unpacked into .deps/ (ignored, and
# carried to the GPU machine with the rest of .deps/). 1.19 is the frontend
# release for cuDNN 9.19.
cudnn_frontend_version=1.19.1
cudnn_frontend_dir=.deps/cudnn-frontend
if [[ "$(cat "$cudnn_frontend_dir/VERSION" 2>/dev/null)" != "$cudnn_frontend_version" ]]; then
  echo "attnkit: fetching the cuDNN frontend headers $cudnn_frontend_version"
  wheel_dir="$(mktemp -d)"
  # Any wheel has the same headers: pin one so the local interpreter does not matter.
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$cudnn_frontend_version" -d "$wheel_dir"
  rm -rf "$cudnn_frontend_dir"
  python3 - "$wheel_dir"/nvidia_cudnn_frontend-*.whl "$cudnn_frontend_dir" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    z.extractall(dest, [n for n in z.namelist() if n.startswith("include/")])
PY
  rm -rf "$wheel_dir"
  echo "$cudnn_frontend_version" > "$cudnn_frontend_dir/VERSION"
fi

if [[ "${1:-}" == "--python" && -f python/requirements-test.txt ]]; then
  python3 -m pip install -q -r python/requirements-test.txt
fi
