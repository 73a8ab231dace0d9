#!/usr/bin/env bash
# Installs every native dependency of spore from Debian's packages. Idempotent and quiet: it only calls
# apt-get when something is missing, so re-running it costs a dpkg query.
set -euo pipefail
pkgs=(build-essential cmake ninja-build ccache pkg-config python3
      libdnnl-dev libhwy-dev libfmt-dev nlohmann-json3-dev libcli11-dev
      libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev
      libprotobuf-dev protobuf-compiler libonnx-dev  # ONNX import/export
      libpcre2-dev  # tokenizer pre-split regexes
      libcpp-httplib-dev  # spore serve's HTTP server
      libopenmpi-dev openmpi-bin  # src/parallel's MPI module (libspore_mpi.so) and the mpirun tests
      iproute2  # `ip netns` / veth: the two-host data-parallel test (tests/parallel/dp_netns_test.py)
      python3-onnx  # tests check exported ONNX files with onnx.checker
      python3-dev pybind11-dev python3-numpy python3-venv python3-build python3-setuptools python3-wheel \
      python3-pytest  # the Python package (make python)
      python3-torch python3-torchvision  # the Python tests compare with PyTorch (DLPack, autograd, exports)
      clang libclang-rt-dev libomp-dev  # libFuzzer (make fuzz); clang needs libomp for -fopenmp
      ocl-icd-opencl-dev  # dnnl-config.cmake calls find_package(OpenCL)
      dataset-fashion-mnist)  # the 60k Fashion-MNIST training split, used by the training acceptance test
# Node.js and npm (the serve tests drive the server with the official openai npm client) from Debian only when the
# machine has none of its own (a NodeSource nodejs bundles npm and conflicts with Debian's npm package).
command -v node >/dev/null || pkgs+=(nodejs)
command -v npm >/dev/null || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
