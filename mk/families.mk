# mk/families.mk: real model families' attention against a real attnd.
#
#   make test-families  every tests/families/cases/*.json (Llama, Mistral,
#                       Qwen2/3, Phi-3, Gemma 2, OLMo 2, GPT-J, GPT-NeoX,
#                       GPT-2, BLOOM, MPT, T5, Longformer and
#                       torch.nn.MultiheadAttention, each computed the way
#                       that family's own code computes it) posted to
#                       $(BUILD)/attnd and compared element-wise within the
#                       contract's 1e-4 * (1 + |reference|); then each v1
#                       fixture of tests/fixtures/lib must still get its
#                       answer, and the bad-input cases that name words of
#                       the error message (did you mean ..., NaN) must
#                       have them (python3 stdlib only)
#   make families       regenerates tests/families/cases with PyTorch and
#                       NumPy (not part of `make test`; review the diff)

FAMILIES_PY := /usr/bin/python3
FAMILIES_DEB_PACKAGES := python3-torch python3-numpy
DEB_TEST_PACKAGES += python3
TEST_TARGETS += test-families

.PHONY: test-families families

test-families: $(BUILD)/attnd
	$(FAMILIES_PY) tests/families/run_families.py --attnd $(BUILD)/attnd \
	  --cases tests/families/cases --v1 tests/fixtures/lib \
	  --messages tests/cases/invalid

families:
	$(call install_missing,$(FAMILIES_DEB_PACKAGES))
	$(FAMILIES_PY) tests/families/gen_families.py tests/families/cases
