# mk/v1.mk: a request that uses none of the contract's v2 fields gets the v1
# answer byte for byte.
#
#   make test-v1-golden   posts tests/v1/golden.py's table of v1 requests
#                         (every v1 option) to $(BUILD)/attnd and compares
#                         each body with the answer a v1 build gave, kept in
#                         tests/v1/golden (compute times blanked)

TEST_TARGETS += test-v1-golden
DEB_TEST_PACKAGES += python3

.PHONY: test-v1-golden

test-v1-golden: $(BUILD)/attnd
	/usr/bin/python3 tests/v1/golden.py check --attnd $(BUILD)/attnd \
	  --golden tests/v1/golden
