#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: the Vulkan driver stack (lavapipe, loader,
# validation layers), glslc, spirv-cross (SPIR-V reflection), node and the pinned npm packages
# wgsl_reflect (WGSL reflection) and webgpu (Dawn, the `dawn` WebGPU implementation),
# chromium and its driver (the report's browser test and the `chrome` implementation), a
# virtual environment in .venv and the Python packages; and, where the machine's own Vulkan
# drivers give Dawn no adapter (Debian bookworm's lavapipe, Mesa 22.3.6), Mesa 25's lavapipe
# from bookworm-backports unpacked into .cache/mesa for the dawn host process only (nothing
# of the system changes; webgpu_backend/gpu/dawn_setup.py).
# Run as root, or as a user with sudo. Every step is skipped when already done.
# `source scripts/setup.sh` defines the functions below and runs nothing (the tests use them).
set -euo pipefail

# The npm packages, each at the version pinned in the one place that pins it: wgsl_reflect in
# webgpu_backend/wgsl_reflect.mjs (the shim that checks it), webgpu in
# webgpu_backend/gpu/host/versions.json (read by the node host and webgpu_backend/gpu/dawn_setup.py).
npm_packages=(wgsl_reflect webgpu)
npm_pin() {
  case $1 in
    wgsl_reflect) sed -n 's/^const WGSL_REFLECT_VERSION = "\(.*\)";$/\1/p' webgpu_backend/wgsl_reflect.mjs ;;
    webgpu) node -p 'require(process.argv[1]).webgpu' "$PWD/webgpu_backend/gpu/host/versions.json" ;;
  esac
}

# The version of npm package $1 installed in .cache/node ("" when it is not).
npm_installed() {
  local manifest=.cache/node/node_modules/$1/package.json
  [ -f "$manifest" ] || return 0
  node -p 'require(process.argv[1]).version' "$PWD/$manifest"
}

# Install every npm package in one npm call (npm removes packages its package.json does not
# list, so each install names them all) unless each is installed at its pinned version.
install_npm_packages() {
  local pkg pin specs=() stale=0
  for pkg in "${npm_packages[@]}"; do
    pin=$(npm_pin "$pkg")
    if [ -z "$pin" ] || [ "$pin" = undefined ]; then
      echo "setup: no version of the npm package $pkg is pinned (webgpu_backend/wgsl_reflect.mjs, webgpu_backend/gpu/host/versions.json)" >&2
      return 2
    fi
    specs+=("$pkg@$pin")
    [ "$(npm_installed "$pkg")" = "$pin" ] || stale=1
  done
  ((stale)) || return 0
  echo "setup: installing the npm packages ${specs[*]} into .cache/node"
  mkdir -p .cache/node
  npm install --prefix .cache/node --save-exact --no-audit --no-fund --loglevel=error \
    "${specs[@]}" >/dev/null
}

# Where the lavapipe for dawn goes when the system's drivers give Dawn no adapter (the same
# folder as webgpu_backend/gpu/dawn_setup.py's MESA_DIR).
mesa_dir=.cache/mesa

# Whether Dawn (the installed npm webgpu) finds an adapter: with only the driver of the ICD
# manifest $1, or with the system's drivers when no manifest is given.
dawn_finds_adapter() {
  local module=$PWD/.cache/node/node_modules/webgpu/index.js
  local loader=(env)
  [ -f "$module" ] || return 1
  [ -z "${1:-}" ] || loader=(env -u VK_DRIVER_FILES -u VK_ADD_DRIVER_FILES "VK_ICD_FILENAMES=$1")
  "${loader[@]}" node --input-type=module -e '
    const { create } = await import(process.argv[1]);
    const adapter = await create([]).requestAdapter();
    process.exit(adapter ? 0 : 1);' "$module" >/dev/null 2>&1
}

# Whether $mesa_dir holds a complete private lavapipe: its manifest's library_path (absolute,
# or relative to the manifest, as the Vulkan loader reads it) names a file.
private_lavapipe_ok() {
  local icd=$mesa_dir/lvp_icd.json
  [ -f "$icd" ] || return 1
  node -e '
    const fs = require("fs"), path = require("path");
    const icd = process.argv[1];
    const lib = JSON.parse(fs.readFileSync(icd)).ICD.library_path;
    process.exit(fs.statSync(path.resolve(path.dirname(icd), lib), { throwIfNoEntry: false })?.isFile() ? 0 : 1);
  ' "$icd" 2>/dev/null
}

# What the machine needs for dawn to have an adapter: "private" (fetch Mesa 25's lavapipe
# into $mesa_dir) or "none" (a private one is there already, the system's Mesa is >= 24, or
# Dawn finds an adapter with the system's drivers: a GPU).
lavapipe_for_dawn_needed() {
  local have
  if private_lavapipe_ok; then echo none; return; fi
  have=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)
  if [ -n "$have" ] && dpkg --compare-versions "$have" ge 24; then echo none; return; fi
  if dawn_finds_adapter; then echo none; return; fi
  echo private
}

# Unpack lavapipe from the mesa-vulkan-drivers deb $1 into $mesa_dir/root and write
# $mesa_dir/lvp_icd.json, its library_path relative to the manifest (the folder may move).
# Only what Dawn accepts replaces an earlier $mesa_dir.
unpack_lavapipe() {
  local deb=$1 stage lib
  mkdir -p "$(dirname "$mesa_dir")"
  stage=$(mktemp -d "$mesa_dir.new.XXXXXX")
  chmod 755 "$stage"  # mktemp's 0700 would hide the driver from other users
  if ! dpkg-deb -x "$deb" "$stage/root" 2>"$stage/dpkg.log"; then
    echo "setup: dawn: dpkg-deb could not unpack $deb ($(tail -1 "$stage/dpkg.log")); dawn will have no adapter here" >&2
    rm -rf "$stage"
    return 0
  fi
  rm -f "$stage/dpkg.log"
  lib=$(cd "$stage" && find root -name libvulkan_lvp.so -print -quit)
  if [ -z "$lib" ]; then
    echo "setup: dawn: $deb holds no libvulkan_lvp.so; dawn will have no adapter here" >&2
    rm -rf "$stage"
    return 0
  fi
  # The deb's own manifest names the library bare (found on the system's library path).
  node -e '
    const fs = require("fs");
    const [debIcd, lib, out] = process.argv.slice(1);
    const api = debIcd ? JSON.parse(fs.readFileSync(debIcd)).ICD.api_version : undefined;
    const icd = { library_path: "./" + lib, ...(api ? { api_version: api } : {}) };
    fs.writeFileSync(out, JSON.stringify({ file_format_version: "1.0.0", ICD: icd }, null, 2) + "\n");
  ' "$(find "$stage/root" -name 'lvp_icd*.json' -print -quit)" "$lib" "$stage/lvp_icd.json"
  if ! dawn_finds_adapter "$(cd "$stage" && pwd)/lvp_icd.json"; then
    echo "setup: dawn: Dawn finds no adapter with the lavapipe of $(basename "$deb") either; dawn will have no adapter here" >&2
    rm -rf "$stage"
    return 0
  fi
  rm -rf "$mesa_dir"
  mv "$stage" "$mesa_dir"
}

# The first error or warning apt wrote to the log $1 (its last line when none).
apt_error() {
  { grep -E '^E:' "$1"; grep -E '^W:' "$1"; } | head -1 | sed 's/  */ /g' | grep . || tail -1 "$1"
}

# Fetch mesa-vulkan-drivers from <codename>-backports through a private apt source and lists
# folder (the system's apt sources and state are read, never changed) and unpack it. A
# failure is one line, and set-up goes on: only dawn needs this.
fetch_lavapipe() {
  local codename id tmp log o
  id=$(. /etc/os-release && echo "${ID:-}")
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  if [ "$id" != debian ] || [ -z "$codename" ]; then
    echo "setup: dawn: this machine's Vulkan drivers give Dawn no adapter, and it is not Debian (backports unknown): install Mesa >= 24's lavapipe (mesa-vulkan-drivers) to run dawn" >&2
    return 0
  fi
  echo "setup: dawn needs Mesa >= 24's lavapipe: unpacking mesa-vulkan-drivers from $codename-backports into $mesa_dir"
  mkdir -p "$(dirname "$mesa_dir")"
  tmp=$(mktemp -d "$mesa_dir.fetch.XXXXXX")
  tmp=$(cd "$tmp" && pwd)
  log=$tmp/apt.log
  mkdir -p "$tmp/sources" "$tmp/lists/partial" "$tmp/debs"
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$codename-backports" > "$tmp/sources/backports.sources"
  o=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$tmp/sources"
    -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
    -o "APT::Sandbox::User=$(id -un)")
  # apt-get update exits 0 when a source fails to download ("W: Failed to fetch"): success is
  # the source's package list arriving.
  apt-get "${o[@]}" update >"$log" 2>&1 || true
  if ! compgen -G "$tmp/lists/*backports*Packages*" >/dev/null; then
    echo "setup: dawn: apt-get update of $codename-backports failed ($(apt_error "$log")); dawn will have no adapter here (the Vulkan runtime and wgpu are unaffected)" >&2
  elif ! (cd "$tmp/debs" && apt-get "${o[@]}" download "mesa-vulkan-drivers/$codename-backports") >"$log" 2>&1; then
    echo "setup: dawn: apt-get download mesa-vulkan-drivers/$codename-backports failed ($(apt_error "$log")); dawn will have no adapter here (the Vulkan runtime and wgpu are unaffected)" >&2
  else
    unpack_lavapipe "$(ls "$tmp"/debs/mesa-vulkan-drivers_*.deb)"
  fi
  rm -rf "$tmp"
}

[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0
cd "$(dirname "$0")/.."

packages=(mesa-vulkan-drivers libvulkan1 glslc spirv-tools spirv-cross vulkan-validationlayers
  chromium chromium-driver)
# node and npm from Debian, unless the machine already has both (e.g. from NodeSource).
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: Python >= 3.11 is required, $python is $("$python" --version 2>&1)" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
# Reinstall only when the dependency list changed.
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[test]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi

install_npm_packages
if [ "$(lavapipe_for_dawn_needed)" = private ]; then
  fetch_lavapipe
fi
