# Every target creates or reuses ./.venv, so `make run` and `make test` work on a fresh clone. Two set-ups, two
# stamps: `make run` (and plan, warm, verify, train, ...) installs only what the main job needs; `make test` (and
# `make setup`) adds what the test suite compares against on top of it.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
UNPACK := $(BIN)/python tools/unpack_deep_gemm.py --fetch
PURELIB = $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The legacy Python-JIT DeepGEMM that sglang 0.5.0-0.5.1.x runs ships inside sgl-kernel 0.3.5 (its deep_gemm package).
# Set-up downloads that wheel to a scratch directory and installs only its 27 MB deep_gemm/ package, with a small
# dist-info naming sgl-kernel 0.3.5, instead of the whole 1.1 GB sgl-kernel; the wheel is deleted after
# (tools/unpack_deep_gemm.py --fetch).
LEGACY_DG := sgl-kernel==0.3.5
# --- the test set-up only ---
# sgl-deep-gemm 0.1.3 (sglang 0.5.14) beside it, in its own folder (both are a top-level deep_gemm): the tests build
# its kernels with nvcc and need only its headers.
DG013 := $(VENV)/sgl-deep-gemm-0.1.3
# Newer sgl-deep-gemm releases, the same light way (headers + _C.so, never imported): one per generated-code
# template the GPU-free nvcc backend reproduces and the device sweep checked (keys/cxx_templates.py).
DG_RELEASES := 0.1.4.post1 0.1.5.post1 0.1.5.post3 0.1.7 0.2.0 0.2.2 0.2.3.post2
# The deep_gemm of sglang-kernel 0.4.2 (sglang 0.5.11; 330 MB wheel), of sgl-kernel 0.3.16.post3 (sglang 0.5.4,
# SpecForge's pin; 550 MB wheel), of sgl-kernel 0.3.9.post2 (sglang 0.5.2; 379 MB wheel) and of sgl-kernel 0.3.21
# (sglang 0.5.9, SpecForge's later pin; 536 MB wheel), 28 MB deep_gemm/ each, unpacked the same way as the legacy
# one, each into a folder of its own (the wheels are deleted after): the tests read their format strings, compute
# their entry names from their headers and build their kernels with nvcc.
SK_DG := sglang-kernel==0.4.2 sgl-kernel==0.3.16.post3 sgl-kernel==0.3.9.post2 sgl-kernel==0.3.21
# sglang 0.5.14 (SpecForge 0.2.0's pin) in a folder of its own, for the tests of its JIT modules (plan names, GPU-free
# build with its own builders, strict refusal): the wheel with --no-deps plus only what its jit_kernel import chain
# needs (about 370 MB). sgl-kernel, triton and torchvision are not installed: tests/standins stands in for them.
# apache-tvm-ffi 0.1.11, not the 0.1.9 that sglang 0.5.14 and sgl-deep-gemm 0.1.3 pin: the version the H200 records
# ran with (tests/data/*_h200.json). warm's install hint names the wheels' own pin (what `pip install sglang==0.5.14`
# gets); the version is part of each module's directory name, so warm where the server's tvm-ffi is installed.
SGL014 := $(VENV)/sglang-0.5.14
SGL014_PKGS := sglang==0.5.14 apache-tvm-ffi==0.1.11 transformers==5.8.1 'huggingface-hub<2' 'tokenizers>=0.22,<=0.23.0' \
	safetensors numpy psutil pillow anyio tqdm httpx httpcore h11 sentencepiece pydantic==2.11.10 pydantic-core==2.33.2 \
	annotated-types==0.8.0 typing-inspection==0.4.5 orjson==3.13.0 pybase64==1.5.1 pyzmq==27.3.0 starlette==1.10.0 \
	sniffio==1.3.1 openai==2.6.1 distro==1.9.0 partial-json-parser==0.2.1.1.post7 dill==0.4.1 compressed-tensors==0.20.1 \
	loguru==0.7.3 gguf==0.19.0 ipython==9.18.1 traitlets==5.16.1
# the sglang wheels whose real server_args.py the tests read (tests/test_server.py: SMALL_WHEELS, 2-12 MB each),
# into .cache/sglang-wheels/, where scripts/update_sglang_args.py keeps them: no test downloads them
SGL_WHEELS := 0.5.1 0.5.3 0.5.4 0.5.9 0.5.14
# sglang 0.5.23 (its own ninja JIT loader, sglang/kernels/jit) the same way, for tests/test_sglang_jit_ninja.py: only
# what that loader's import chain needs (about 340 MB); triton is tests/standins' stand-in.
SGL023 := $(VENV)/sglang-0.5.23
# transformers .. sentencepiece: what its fused MoE path imports (tests/test_triton_moe_plan.py, its server-args
# runtime context projects model config modules); transformers is the release's own pin
SGL023_PKGS := sglang==0.5.23 apache-tvm-ffi==0.1.11 msgspec==0.23.0 numpy==2.4.6 orjson==3.13.0 psutil==7.2.2 \
	pybase64==1.5.1 pillow==13.0.0 starlette==1.10.0 anyio==4.16.0 pyzmq==27.3.0 tqdm==4.70.1 ipython==9.18.1 \
	traitlets==5.16.1 transformers==5.19.0 huggingface-hub==1.33.0 tokenizers==0.23.3 safetensors==0.8.0 \
	httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 dill==0.4.1 sentencepiece==0.2.3
# the sglang releases whose JIT modules are modelled beside 0.5.14 and 0.5.23 (data/sglang_jit.yaml: 0.5.15-0.5.17,
# data/sglang_jit_ninja.yaml: 0.5.18-0.5.19), each wheel alone (--no-deps, 12-26 MB) in a folder of its own:
# tests/test_sglang_jit_releases.py and test_sglang_jit_ninja_hook.py call its own builders with 0.5.14's and
# 0.5.23's import chains behind it; 0.5.10 and 0.5.13 (tvm-ffi's own directory names, tests/test_sglang_jit_0510.py)
SGL_JIT_RELEASES := 0.5.10 0.5.13 0.5.15 0.5.16 0.5.17 0.5.18 0.5.19
# sglang 0.5.9's JIT (tests/test_sglang_jit_059.py): its wheel the same way, and flashinfer-python 0.6.3 (its pin,
# --no-deps, about 57 MB) beside it for the rope module's headers, whose location is part of that module's name
SGL059_FLASHINFER := $(VENV)/flashinfer-0.6.3
# xgrammar 0.2.1 (what sglang 0.5.17-0.5.19 pin; --no-deps, a 45 MB wheel) in a folder of its own: their server_args
# imports it (srt/function_call/inkling_detector.py), and the GPU-free Triton MoE warm of 0.5.17 publishes SGLang's
# own ServerArgs (tests/test_triton_moe_releases.py); 0.5.14's and 0.5.23's chains do not need it
XGRAMMAR_DIR := $(VENV)/xgrammar-0.2.1
TORCH ?= 2.13.0
# Triton 3.6.0 (what the H200's torch 2.11 pairs with) in a folder of its own, NOT on the venv's path (the sglang
# tests stand in for it): tests/test_triton_capture.py compiles real kernels for sm_90 with it on this GPU-less machine,
# SGLang 0.5.14's fused_moe_kernel among them (its MoE runner package imports einops, hence einops beside it).
TRITON_DIR := $(VENV)/triton-3.6.0
# Triton 3.8.0 (torch 2.14.1's pin, so sglang 0.5.22-0.5.23's stack; a 248 MB wheel, about 900 MB installed) the same
# way: tests/test_triton_38_host.py builds, refuses and captures its one host module (cuda_utils) with its own code.
TRITON_38 := $(VENV)/triton-3.8.0
# Triton 3.7.1 (sglang 0.5.18-0.5.21's torch pin) the same way, for the same tests: its cuda_utils is keyed as 3.6's,
# and, like 3.8, it builds no launcher module
TRITON_37 := $(VENV)/triton-3.7.1
# Triton 3.5.1 (torch 2.9.1's pin, so sglang 0.5.9-0.5.10's) the same way, with the einops 0.5.9's MoE imports:
# tests/test_triton_35_host.py warms 0.5.9's fused MoE and its host modules (3.5 links -lcuda) GPU-free
TRITON_35 := $(VENV)/triton-3.5.1
# flashinfer-python 0.6.12 (what sglang 0.5.14 and 0.5.15 pin; a 14 MB wheel with FlashInfer's sources and headers)
# in a folder of its own with the small packages its import needs: tests/test_flashinfer_modules.py builds one of its
# JIT modules GPU-free with FlashInfer's own JitSpec and builder (apache-tvm-ffi comes from SGL014).
FLASHINFER_DIR := $(VENV)/flashinfer-0.6.12
FLASHINFER_PKGS := flashinfer-python==0.6.12 einops==0.8.2 tabulate==0.10.0 nvidia-ml-py==13.615.71
# flashinfer-python 0.7.2 (what sglang 0.5.23 pins: the first FlashInfer whose nvcc modules are JitSpecNvcc under an
# abstract JitSpec; a 65 MB wheel, about 600 MB installed) the same way, for the same tests against its own builder
FLASHINFER_072 := $(VENV)/flashinfer-0.7.2
FLASHINFER_072_PKGS := flashinfer-python==0.7.2 einops==0.8.2 tabulate==0.10.0 nvidia-ml-py==13.615.71
# cuRAND's headers for CUDA 13 (the nvidia-curand wheel, 129 MB installed) in a folder of its own: this machine's
# toolkit has none, and FlashInfer's sampling module includes them (flashinfer/sampling.cuh:20-22).
# tests/test_build_failures.py builds that module of 0.6.12 and 0.7.2 GPU-free with the folder given to FlashInfer's
# build through FLASHINFER_EXTRA_CUDAFLAGS=-I$(CURAND_DIR)/nvidia/cu13/include (what warm's hint names).
CURAND_DIR := $(VENV)/nvidia-curand-10.4.0.35

MODEL ?= Qwen3-Coder-480B
TP ?= 8
EP ?= 8
SGLANG ?= 0.5.1
MANIFEST ?= shapes/Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.0-0.5.1.auto.yaml
CACHE_DIR ?= $(CURDIR)/.cache/deep_gemm
ARTIFACT ?= out/deepgemm-{fingerprint}.tar.gz
CONFIG ?= train.yaml

.PHONY: setup run test plan warm verify cache-artifact train lint shapes sglang-args proofs-table gpu-test clean

# torch is pinned to the CPU build this workplace keeps on disk (the compile path needs only torch's CPU side);
# an unpinned torch would pull a multi-GB CUDA build.
$(RUN_STAMP): pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==$(TORCH)
	$(BIN)/pip install -q -e '.[legacy]'
	@echo "set-up: the $(LEGACY_DG) wheel, downloaded to a scratch directory for its deep_gemm package only"
	$(BIN)/pip uninstall -q -y sgl-kernel
	$(UNPACK) $(LEGACY_DG) $(PURELIB)
	rm -rf $(VENV)/wheels  # wheels an earlier set-up kept inside the venv
	touch $@

$(TEST_STAMP): $(RUN_STAMP)
	$(BIN)/pip install -q -e '.[dev,legacy,test]'
	$(BIN)/pip install -q --no-deps --target $(DG013) sgl-deep-gemm==0.1.3
	for v in $(DG_RELEASES); do $(BIN)/pip install -q --no-deps --target $(VENV)/sgl-deep-gemm-$$v sgl-deep-gemm==$$v || exit 1; done
	$(BIN)/pip install -q --no-deps --target $(SGL014) $(SGL014_PKGS)
	$(BIN)/pip install -q --no-deps --target $(TRITON_DIR) triton==3.6.0 einops==0.8.1
	$(BIN)/pip install -q --no-deps --target $(TRITON_38) triton==3.8.0
	$(BIN)/pip install -q --no-deps --target $(TRITON_37) triton==3.7.1
	$(BIN)/pip install -q --no-deps --target $(TRITON_35) triton==3.5.1 einops==0.8.1
	$(BIN)/pip install -q --no-deps --target $(FLASHINFER_DIR) $(FLASHINFER_PKGS)
	$(BIN)/pip install -q --no-deps --target $(FLASHINFER_072) $(FLASHINFER_072_PKGS)
	$(BIN)/pip install -q --no-deps --target $(CURAND_DIR) nvidia-curand==10.4.0.35
	for w in $(SK_DG); do $(UNPACK) $$w $(VENV)/$$(echo $$w | sed 's/==/-/') || exit 1; done  # one each: two sgl-kernel versions in one call conflict
	$(BIN)/python scripts/update_sglang_args.py --fetch $(SGL_WHEELS)
	$(BIN)/pip download -q --no-deps --only-binary :all: -d .cache/wheels sgl-deep-gemm==0.1.3  # tests/test_unpack_tool.py: a real wheel (4.6 MB), outside the venv
	$(BIN)/pip install -q --no-deps --target $(SGL023) $(SGL023_PKGS)
	for v in $(SGL_JIT_RELEASES); do $(BIN)/pip install -q --no-deps --target $(VENV)/sglang-$$v sglang==$$v || exit 1; done
	$(BIN)/pip install -q --no-deps --target $(VENV)/sglang-0.5.9 sglang==0.5.9
	$(BIN)/pip install -q --no-deps --target $(SGL059_FLASHINFER) flashinfer-python==0.6.3
	$(BIN)/pip install -q --no-deps --target $(XGRAMMAR_DIR) xgrammar==0.2.1
	touch $@

setup: $(TEST_STAMP)

# The main job on its embedded default: warm the Qwen3-Coder-480B tp8/ep8 sglang-0.5.1 plan (legacy JIT, CPU only).
run: $(RUN_STAMP)
	$(BIN)/dgprecompile warm --manifest $(MANIFEST) --cache-dir $(CACHE_DIR)
	$(BIN)/dgprecompile verify --manifest $(MANIFEST) --cache-dir $(CACHE_DIR)

# one worker per core, each taking whole files (a file's module fixtures are built once): most tests wait on one
# compiler process; on 2 cores the suite took 54 min where one worker had taken 84 (docs/setup.md). Two, as CI's
# machine has 2 cores (a container's CPU count can be the host's): `make test TEST_WORKERS=auto` on a larger one.
# Files go out in collection order (--no-loadscope-reorder), which tests/file_order.py sets longest first.
TEST_WORKERS ?= 2
test: $(TEST_STAMP)
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=40

plan: $(RUN_STAMP)
	$(BIN)/dgprecompile plan --model $(MODEL) --tp $(TP) --ep $(EP) --sglang $(SGLANG)

warm: run

verify: $(RUN_STAMP)
	$(BIN)/dgprecompile verify --manifest $(MANIFEST) --cache-dir $(CACHE_DIR)

cache-artifact: run
	$(BIN)/dgprecompile pack --manifest $(MANIFEST) --cache-dir $(CACHE_DIR) -o '$(ARTIFACT)'

# The cache `make run` warmed (CACHE_DIR), so the two chain; run it from a SpecForge checkout (the command is
# train.yaml's `command:`, scripts/train_eagle3_sgl_online.py), or pass CONFIG=your.yaml.
train: $(RUN_STAMP)
	$(BIN)/dgprecompile launch --config $(CONFIG) --cache-dir $(CACHE_DIR)

# Re-read SGLang's server options from its wheels into dgprecompile/data/sglang_args/ (pip download, no import).
sglang-args: $(TEST_STAMP)
	$(BIN)/python scripts/update_sglang_args.py

# Regenerate the checked-in manifests (tests fail when they drift from the code).
shapes: $(RUN_STAMP)
	$(BIN)/python -m dgprecompile.planning.bundled shapes

# The tables of device proofs at HEAD (docs/proof.md's, and the README's support tables from docs/support.yaml), from
# bench/results/*/record.json and bench/proof_families.yaml (a record proves a family only when no later commit
# touched that family's code; tests/test_proofs_table.py checks it).
proofs-table: $(RUN_STAMP)
	$(BIN)/python scripts/proofs_table.py

gpu-test: $(TEST_STAMP)
	$(BIN)/pytest -q -m gpu tests/gpu

lint: $(TEST_STAMP)
	$(BIN)/ruff check dgprecompile tests bench examples tools

clean:
	rm -rf $(VENV) .cache out
