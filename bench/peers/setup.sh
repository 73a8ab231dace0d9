#!/usr/bin/env bash
# Installs the peers spore's training benchmark compares with, from Debian's apt (idempotent):
# PyTorch 1.13 (python3-torch) and OpenBLAS, which Debian's torch uses for fp32 matmul through the
# libblas.so.3 alternative (with only the reference BLAS installed torch's Linear layers run ~10x slower,
# which would flatter spore).
set -euo pipefail
pkgs=(python3-torch python3-torchvision python3-numpy libopenblas0-pthread python3-onnx)
# Node.js and npm from Debian only when the machine has no node/npm of its own (a NodeSource nodejs bundles npm and
# conflicts with Debian's npm package).
command -v node >/dev/null || pkgs+=(nodejs)
command -v npm >/dev/null || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench/peers/setup.sh: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)
case "$blas" in *openblas*) ;; *) echo "bench/peers/setup.sh: warning: libblas.so.3 is $blas, not OpenBLAS" >&2 ;; esac
# ONNX Runtime for infer_vs_ort.py: npm onnxruntime-node (CPU library inside the package; .npmrc there skips the
# postinstall that would fetch CUDA parts).
if [ ! -d bench/peers/ort/node_modules/onnxruntime-node ]; then
  (cd "$(dirname "$0")/ort" && npm install --no-audit --no-fund >/dev/null)
fi
