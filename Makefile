# Set-up-to-result entry points (see README). Each installs what it needs with apt-get first.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_TIME ?= 120
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# ccache keys objects on paths relative to the checkout (and not on the build folder), so another clone of the
# repository on the same machine - CI's - reuses this one's objects instead of compiling everything again.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= true

.PHONY: deps build python demo test test-asan fuzz bench bench-peers clean

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The Python package (docs/PYTHON.md): a wheel from the build folder's extension, installed into .venv (made with
# Debian's python3 and --system-site-packages, so Debian's NumPy and torch are seen; system pip refuses to install
# into Debian's Python). Then `.venv/bin/python -c "import spore"` works.
python: build
	@/usr/bin/python3 -m venv --system-site-packages .venv
	@rm -rf $(BUILD)/dist && cd python && SPORE_BUILD_DIR=$(abspath $(BUILD)) /usr/bin/python3 -m build --wheel \
	  --no-isolation --outdir $(abspath $(BUILD))/dist . >$(abspath $(BUILD))/python-wheel.log 2>&1 \
	  || (cat $(abspath $(BUILD))/python-wheel.log; exit 1)
	@.venv/bin/python -m pip install --quiet --no-deps --no-index --force-reinstall $(BUILD)/dist/spore-*.whl
	@.venv/bin/python -c "import spore; print('spore', spore.__version__, 'installed in .venv:', spore.__file__)"

# The main job: build, show what spore runs on and a graph-mode demo, then train SimpleNet on the bundled digits
# in graph mode, evaluate the checkpoint, export it (.spore and ONNX), check its ops, convert it to fp16 and to
# static int8 (the report gives size and accuracy cost against f32), and benchmark the int8 file. Last, the small
# language model spore trained on Shakespeare (data/lm, shipped) writes 64 greedy tokens.
demo: build
	./$(BUILD)/spore info
	./$(BUILD)/spore demo
	./$(BUILD)/spore train --model simplenet --dataset digits:data/digits.csv.gz --epochs 3 --batch 16 --lr 0.05 \
	  --mode graph --ckpt-dir out/ckpt --no-progress
	./$(BUILD)/spore eval --model simplenet --ckpt out/ckpt/simplenet_epoch3.safetensors --dataset digits:data/digits.csv.gz
	./$(BUILD)/spore export --model simplenet --ckpt out/ckpt/simplenet_epoch3.safetensors \
	  --input-shape x:batch,1,8,8 -o out/simplenet.onnx
	./$(BUILD)/spore check-ops out/simplenet.onnx
	./$(BUILD)/spore convert out/simplenet.onnx -o out/simplenet_fp16.spore --precision-mode allow_fp32_to_fp16 \
	  --eval-data digits:data/digits.csv.gz
	./$(BUILD)/spore convert out/simplenet.onnx -o out/simplenet_int8.spore --quantize int8 \
	  --calib-data digits:data/digits.csv.gz --eval-data digits:data/digits.csv.gz
	./$(BUILD)/spore bench out/simplenet_int8.spore --batch 32 --threads 1
	./$(BUILD)/spore generate data/lm/shakespeare.gguf -p "ROMEO:" -n 64 --temp 0

# Every test: unit, conformance (every op x dtype vs the reference backend), integration (CLI), acceptance
# (training runs on real data). ctest runs tests side by side: OpenMP threads that spin-wait for work
# (libgomp's default) then starve each other on a 2-core machine, so tests wait passively.
test: build python
	cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -j $(JOBS) --timeout 900

# Unit tests under AddressSanitizer + UndefinedBehaviorSanitizer.
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPORE_SANITIZE=ON -DSPORE_BUILD_BENCH=OFF \
	  -DSPORE_BUILD_PYTHON=OFF >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && OMP_WAIT_POLICY=passive ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) -L unit --timeout 900

# The .spore reader under libFuzzer + ASan + UBSan (clang; fuzz/CMakeLists.txt): seeds are valid files
# generated from examples/ir; runs FUZZ_TIME seconds and fails on a crash, a sanitizer report, a leak or an
# internal error (a reproducer lands in $(FUZZ_BUILD)/crash-*). The corpus it grows is kept for the next run.
fuzz: deps
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPORE_BUILD_FUZZ=ON \
	  -DSPORE_SANITIZE=ON -DSPORE_BUILD_TESTS=OFF -DSPORE_BUILD_BENCH=OFF -DSPORE_BUILD_PYTHON=OFF >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target spore_load_fuzz spore_fuzz_seeds
	rm -rf $(FUZZ_BUILD)/seeds && mkdir -p $(FUZZ_BUILD)/corpus
	./$(FUZZ_BUILD)/fuzz/spore_fuzz_seeds $(FUZZ_BUILD)/seeds examples/ir/*.ir
	./$(FUZZ_BUILD)/fuzz/spore_load_fuzz $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/seeds -dict=fuzz/spore.dict \
	  -max_total_time=$(FUZZ_TIME) -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/

bench: build
	bash scripts/bench.sh -b $(BUILD)

# spore vs PyTorch training throughput and accuracy (installs python3-torch and OpenBLAS from apt).
bench-peers: build
	bash bench/peers/setup.sh
	/usr/bin/python3 bench/peers/train_vs_torch.py --spore $(BUILD)/spore --repeats 5 --accuracy-epochs 5
	/usr/bin/python3 bench/peers/infer_vs_ort.py --spore $(BUILD)/spore --repeats 5 --passes

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
