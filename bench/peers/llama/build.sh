#!/usr/bin/env bash
# Builds llama.cpp (the commit shipped inside node-llama-cpp@3.21.1) and spore's llama_ref tool, offline.
#   bash bench/peers/llama/build.sh            # idempotent: re-running only rebuilds what changed
# Env: JOBS (default 2), LLAMA_BUILD_DIR (default bench/peers/llama/build), LLAMA_SERVER=1 also builds llama-server
# (bench/peers/serve_vs_llamacpp.py; its web UI is off, so nothing is downloaded).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
jobs="${JOBS:-2}"
build="${LLAMA_BUILD_DIR:-$here/build}"
bundle="$here/node_modules/node-llama-cpp/llama/gitRelease.bundle"
commit=80fb11a

if [ ! -f "$bundle" ]; then
    echo "== npm install (node-llama-cpp 3.21.1, scripts off)"
    npm install --no-audit --no-fund
fi
if [ ! -d src/.git ]; then
    echo "== cloning llama.cpp from $bundle"
    rm -rf src
    git clone -q "$bundle" src
fi
have="$(git -C src rev-parse --short=7 HEAD)"
if [ "$have" != "$commit" ]; then
    echo "build.sh: src/ is at $have, expected llama.cpp $commit; remove bench/peers/llama/src and re-run" >&2
    exit 1
fi

launcher=()
if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$build/build.ninja" ]; then
    echo "== configuring $build"
    # The server is configured with its web UI off (LLAMA_BUILD_UI / LLAMA_USE_PREBUILT_UI would download it) and
    # built only with LLAMA_SERVER=1; app off.
    cmake -S src -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
        -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF
fi
targets=(llama llama-bench llama-completion llama-quantize)
if [ "${LLAMA_SERVER:-0}" = 1 ]; then
    # A build folder configured before the server was: turn it on (UI off), a cheap re-configure.
    cmake -S src -B "$build" -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >/dev/null
    targets+=(llama-server)
fi
echo "== building llama.cpp (-j$jobs)"
start=$(date +%s)
nice ninja -C "$build" -j"$jobs" "${targets[@]}"
echo "== llama.cpp built in $(( $(date +%s) - start )) s"

# llama_ref: spore's logits/greedy-decode reference, linked against the static libraries above.
ref="$build/bin/llama_ref"
libs=("$build/src/libllama.a" "$build/ggml/src/libggml.a" "$build/ggml/src/libggml-cpu.a"
      "$build/ggml/src/libggml-base.a")
if [ ! -x "$ref" ] || [ llama_ref.cpp -nt "$ref" ] || [ "${libs[0]}" -nt "$ref" ]; then
    echo "== building llama_ref"
    nice "${CXX:-c++}" -std=c++17 -O2 -Wall -Wextra -I src/include -I src/ggml/include llama_ref.cpp \
        "${libs[@]}" -fopenmp -lpthread -ldl -o "$ref"
fi
echo "== done: $build/bin/{llama-bench,llama-completion,llama-quantize,llama_ref}"
