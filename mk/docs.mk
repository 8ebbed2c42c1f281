# mk/docs.mk: the documentation agrees with the binary and the tree.
#
#   make test-docs   docs/operations.md's options table lists exactly the
#                    options `attnd --help` prints (variable and default
#                    included); its metrics table holds every metric a running
#                    attnd exposes on /metrics; docs/api.md's errors table
#                    has every code and status of service/errors.h; every
#                    relative link in README.md and docs/*.md reaches an
#                    existing file (and heading)
#   make screenshot  docs/img/dashboard.png, the README's picture, taken anew
#                    from the dashboard's default request in headless
#                    chromium (tests/docs/screenshot.mjs); not part of
#                    `make test`
#
# python3 stdlib only (tests/docs/check_docs.py); attnd is started on a free
# loopback port and stopped with SIGTERM.

DOCS_PY := /usr/bin/python3
TEST_TARGETS += test-docs

.PHONY: test-docs screenshot

test-docs: $(BUILD)/attnd
	$(DOCS_PY) tests/docs/check_docs.py --attnd $(BUILD)/attnd

screenshot: $(BUILD)/attnd web-npm
	ATTND_BIN=$(abspath $(BUILD)/attnd) node tests/docs/screenshot.mjs
