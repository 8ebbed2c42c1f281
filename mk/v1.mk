# mk/v1.mk: a request that uses none of the contract's v2 fields gets the v1
# answer byte for byte.
#
#   make test-v1-golden   posts tests/v1/golden.py's table of v1 requests
#                         (every v1 option) to $(BUILD)/attnd and compares
#                         each body with the answer a v1 build gave, kept in
#                         tests/v1/golden (compute times blanked)
#
# The bytes depend on OpenBLAS's kernels: its Haswell sgemm rounds some
# products differently from the Cooperlake one the golden answers were made
# with, and its core detection picks either on machines of this project's
# kind. On a CPU that has Cooperlake's instructions (AVX-512 BF16) the check
# runs attnd with those kernels (OPENBLAS_CORETYPE, which attnd honours);
# elsewhere with what OpenBLAS picks, where the bytes may differ.

TEST_TARGETS += test-v1-golden
DEB_TEST_PACKAGES += python3

.PHONY: test-v1-golden

V1_GOLDEN_CORETYPE := $(if $(shell grep -qw avx512_bf16 /proc/cpuinfo \
                        2>/dev/null && echo y),Cooperlake)

test-v1-golden: $(BUILD)/attnd
	$(if $(V1_GOLDEN_CORETYPE),OPENBLAS_CORETYPE=$(V1_GOLDEN_CORETYPE)) \
	  /usr/bin/python3 tests/v1/golden.py check --attnd $(BUILD)/attnd \
	  --golden tests/v1/golden
