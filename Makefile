# Thin front for CMake + Ninja. `make run` and `make test` are the two commands a new user runs.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc)
CMAKE_GEN  := -G Ninja

.PHONY: all deps configure build run test test-fast test-asan test-arm64 test-x86-cpus fuzz bench clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release

configure: $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: the E2B-shaped prompt-processing benchmark on a model generated in memory.
run: build
	$(BUILD)/bin/gem4 bench

# Every test: the Release suite, the unit tests again under ASan+UBSan, and a short fuzz run.
test: build
	cd $(BUILD) && ctest --output-on-failure -j 1
	$(MAKE) test-asan
	$(MAKE) fuzz FUZZ_SECONDS=$${FUZZ_SECONDS:-20}
	if [ "$$(uname -m)" = x86_64 ]; then $(MAKE) test-x86-cpus test-arm64; fi  # native on an ARM machine already

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j 1

$(ASAN_BUILD)/build.ninja: | deps
	cmake -S . -B $(ASAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGEM4_SANITIZE=ON

test-asan: $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target gem4_tests gem4
	GEM4_PACK_CACHE=off GEM4_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(ASAN_BUILD)/bin/gem4_tests --gtest_filter='-*Slow*' --gtest_brief=1

# AArch64: cross-built, the kernel and tiny-model fidelity tests and `gem4 run` under qemu-user
# (scripts/test_arm64.sh), the text compared with this machine's binary.
ARM64_BUILD ?= build-arm64
test-arm64: build
	bash scripts/test_arm64.sh $(ARM64_BUILD) $(BUILD)/bin/gem4

# x86-64: the binary `make build` made, checked for the CPUs this one is not (scripts/test_x86_cpus.sh):
# no instruction beyond x86-64 outside the kernel sets' files, and the kernel and fidelity tests under
# qemu-user as an AVX2-only Intel and AMD CPU and a CPU without AVX.
test-x86-cpus: build
	bash scripts/test_x86_cpus.sh $(BUILD)

FUZZ_SECONDS ?= 60
fuzz: | deps
	bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

bench: build
	$(BUILD)/bin/gem4 bench -r 3

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(ARM64_BUILD)
