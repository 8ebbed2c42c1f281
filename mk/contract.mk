# mk/contract.mk: the wire contract checked from the outside.
#
#   make test-contract  tests/contract/check_contract.py against
#                       $(BUILD)/attnd on a free loopback port: every v1
#                       and v2 field, the errors and their pointers, the
#                       tensor store (refs in every float field, eviction,
#                       the size options), layers and rollout, each answer
#                       against a float64 NumPy reference written from the
#                       contract; a few servers of its own for the options
#   make test-combos    tests/contract/combos.py: seeded random requests
#                       that combine every field of the contract, each
#                       against its own float64 reference and against the
#                       same request changed in ways that change nothing
#                       (refs, encoding, layout, packing, batch, one-layer
#                       layers, mean), and near-valid requests that break
#                       one rule. COMBOS_ARGS adds options (--seed, --cases,
#                       --port-range LO-HI)
#   make test-store-model  tests/contract/store_model.py: seeded random
#                       uploads (three forms), GET/HEAD, and requests with
#                       refs and store: true (layers too) against a model
#                       of the tensor store (LRU within the byte bound,
#                       first shapes, the five metrics) on small stores,
#                       each answer against the same request inline; then
#                       concurrent clients, no 5xx, metrics against a HEAD
#                       of every ref. STORE_MODEL_ARGS adds options

DEB_TEST_PACKAGES += python3 python3-numpy
TEST_TARGETS += test-contract test-combos test-store-model
COMBOS_ARGS ?=
STORE_MODEL_ARGS ?=

.PHONY: test-contract test-combos test-store-model

test-contract: $(BUILD)/attnd
	/usr/bin/python3 tests/contract/check_contract.py --binary $(BUILD)/attnd

# seed 24 draws, among its first cases, a softcap over scores that overflow
# float32; 2000 cases take about 20 s
test-combos: $(BUILD)/attnd
	/usr/bin/python3 tests/contract/combos.py --binary $(BUILD)/attnd \
	    --seed 24 --cases 2000 $(COMBOS_ARGS)

# five store sizes from a value over the bookkeeping to a dozen tensors;
# about 10 s
test-store-model: $(BUILD)/attnd
	/usr/bin/python3 tests/contract/store_model.py --binary $(BUILD)/attnd \
	    --seed 7 --ops 2000 --caps 1500,2600,4099,330,260 --threads 8 \
	    --conc-ops 400 $(STORE_MODEL_ARGS)
