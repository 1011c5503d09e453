#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: the Vulkan driver stack (lavapipe, loader,
# validation layers), glslc, spirv-cross (SPIR-V reflection), node and the npm package
# wgsl_reflect (WGSL reflection), chromium and its driver (the HTML report's browser test), a
# virtual environment in .venv and the Python packages.
# Run as root, or as a user with sudo. Every step is skipped when already done.
set -euo pipefail
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

# The npm package wgsl_reflect (WGSL reflection) in .cache/node, at the one version pinned in
# webgpu_backend/wgsl_reflect.mjs.
pinned=$(sed -n 's/^const WGSL_REFLECT_VERSION = "\(.*\)";$/\1/p' webgpu_backend/wgsl_reflect.mjs)
manifest=.cache/node/node_modules/wgsl_reflect/package.json
installed=$(node -p "require('fs').existsSync('$manifest') && JSON.parse(require('fs').readFileSync('$manifest')).version")
if [ "$installed" != "$pinned" ]; then
  echo "setup: installing the npm package wgsl_reflect@$pinned into .cache/node"
  mkdir -p .cache/node
  npm install --prefix .cache/node --save-exact --no-audit --no-fund --loglevel=error \
    "wgsl_reflect@$pinned" >/dev/null
fi
