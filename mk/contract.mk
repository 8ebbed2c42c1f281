# mk/contract.mk: the wire contract checked from the outside.
#
#   make test-contract  tests/contract/check_contract.py against
#                       $(BUILD)/attnd on a free loopback port: every v1
#                       and v2 field, the errors and their pointers, the
#                       tensor store (refs in every float field, eviction,
#                       the size options), layers and rollout, each answer
#                       against a float64 NumPy reference written from the
#                       contract; a few servers of its own for the options

DEB_TEST_PACKAGES += python3 python3-numpy
TEST_TARGETS += test-contract

.PHONY: test-contract

test-contract: $(BUILD)/attnd
	/usr/bin/python3 tests/contract/check_contract.py --binary $(BUILD)/attnd
