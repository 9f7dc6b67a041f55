#!/usr/bin/env bash
# Installs ONNX Runtime for Node.js (npm onnxruntime-node 1.30.0, CPU) into <repo>/node_modules: the runtime that
# `ipj export --verify`, the export tests and bench/onnx.sh run exported models on. Idempotent; needs Node.js + npm
# (scripts/install-deps.sh) and the npm registry. --ignore-scripts: the package ships its CPU libonnxruntime and
# Node binding in the tarball (bin/napi-v6/linux/x64); its postinstall only downloads optional GPU binaries.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=1.30.0
package="$root/node_modules/onnxruntime-node"
binding="$package/bin/napi-v6/linux/x64/onnxruntime_binding.node"
if [ -f "$binding" ] && grep -q "\"version\": \"$version\"" "$package/package.json" 2>/dev/null; then
  echo "install-onnxruntime: onnxruntime-node $version present in $root/node_modules"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install-onnxruntime: npm not found; run scripts/install-deps.sh (Node.js and npm) first" >&2
  exit 1
fi
cd "$root"
npm install --ignore-scripts --no-save --no-audit --no-fund --no-package-lock "onnxruntime-node@$version"
if [ ! -f "$binding" ]; then
  echo "install-onnxruntime: $binding missing after npm install (platform not linux/x64?)" >&2
  exit 1
fi
node -e "require('$package'); console.log('install-onnxruntime: onnxruntime-node $version works')"
