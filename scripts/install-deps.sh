#!/usr/bin/env bash
# Installs gem4's build and test dependencies from Debian packages.
# A no-op when everything is already present. Needs root (or sudo) only when something is missing.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev googletest libgtest-dev libgmock-dev
          libbenchmark-dev nlohmann-json3-dev libcpp-httplib-dev libfmt-dev tmux nodejs
          python3 python3-jsonschema libstb-dev  # libstb-dev: stb_image decodes images as llama.cpp does
          chromium chromium-driver nginx wrk curl  # the chat page test; replicas behind nginx; the load test
          ccache)
# make test-arm64 on an x86-64 machine: the AArch64 cross compiler and user-mode emulation (whose
# qemu-x86_64-static also runs make test-x86-cpus: this binary as other x86-64 CPUs).
if [ "$(uname -m)" = x86_64 ]; then
  packages+=(g++-aarch64-linux-gnu qemu-user-static)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm (for the OpenAI Node.js client test) ships inside NodeSource's nodejs; Debian splits it out.
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
