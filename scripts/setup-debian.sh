#!/usr/bin/env bash
# Installs everything Hearth needs to build and test on Debian 12 (run as root or with sudo).
# Libraries come from Debian; the server's JavaScript test clients come from npm (see test.sh).
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config git ccache \
  googletest libgtest-dev \
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libboost-dev \
  libcurl4-openssl-dev libssl-dev libicu-dev libedit-dev \
  libsentencepiece-dev \
  clang libclang-rt-14-dev \
  g++-aarch64-linux-gnu qemu-user \
  python3 python3-jinja2 python3-regex tmux curl procps \
  nodejs chromium >/dev/null
# npm ships with Debian's nodejs only as a separate package; install it when missing.
command -v npm >/dev/null || $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
echo "hearth: Debian packages installed"
