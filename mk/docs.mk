# mk/docs.mk: the documentation agrees with the binary and the tree.
#
#   make test-docs   docs/operations.md's options table lists exactly the
#                    options `attnd --help` prints (variable and default
#                    included); its metrics table holds every metric a running
#                    attnd exposes on /metrics; docs/api.md's errors table
#                    has every code and status of service/errors.h; the
#                    requests README.md and docs/api.md show with their
#                    answers get those answers, to the digits shown; every
#                    relative link in README.md and docs/*.md reaches an
#                    existing file (and heading)
#   make screenshot  docs/img/dashboard.png, the README's picture, taken anew
#                    from the dashboard's default request in headless
#                    chromium (tests/docs/screenshot.mjs); not part of
#                    `make test`
#   make test-openapi  GET /openapi.json is valid OpenAPI 3, and real
#                    answers of a running attnd (every path and method,
#                    v1 and v2, the store, layers, every error status it
#                    can be made to give) validate against it
#
# test-docs: python3 stdlib only (tests/docs/check_docs.py); test-openapi:
# node and the packages of tests/openapi/package-lock.json (an OpenAPI
# validator and ajv). Each starts attnd on a free loopback port.

DOCS_PY := /usr/bin/python3
TEST_TARGETS += test-docs test-openapi
DEPS_EXTRA += openapi-npm

.PHONY: test-docs test-openapi openapi-npm screenshot

test-docs: $(BUILD)/attnd
	$(DOCS_PY) tests/docs/check_docs.py --attnd $(BUILD)/attnd

screenshot: $(BUILD)/attnd web-npm
	ATTND_BIN=$(abspath $(BUILD)/attnd) node tests/docs/screenshot.mjs
openapi-npm: npm-tool
	$(call npm_ci,tests/openapi,)

test-openapi: $(BUILD)/attnd openapi-npm
	ATTND_BIN=$(abspath $(BUILD)/attnd) node tests/openapi/check_openapi.mjs
