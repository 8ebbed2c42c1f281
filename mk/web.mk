# mk/web.mk: the dashboard. Every file under web/ and every ASSET_FILES entry
# is embedded into $(BUILD)/gen/assets.c by tools/embed.c; the service links
# ASSETS_OBJ (named in mk/service.mk). Browser test: headless Debian
# chromium via playwright-core.
#
# ASSET_FILES: space-separated `urlpath=file[:content-type]` entries added by
# the fragments read before this one (the Makefile's order), e.g.
# /openapi.json=service/attend/openapi.json:application/json.
# web/index.html is served at `/`, any other web/<path> at `/<path>`; the
# content type of web files is guessed from the extension by embed.

ASSET_FILES ?=
EMBED := $(BUILD)/tools/embed

WEB_FILES := $(shell find web -type f ! -name '.*' ! -name '*~' 2>/dev/null | LC_ALL=C sort)
web_url = $(if $(filter web/index.html,$(1)),/,$(patsubst web/%,/%,$(1)))
WEB_ENTRIES := $(foreach f,$(WEB_FILES),$(call web_url,$(f))=$(f))

web_asset_entries = $(WEB_ENTRIES) $(ASSET_FILES)
web_asset_srcs = $(WEB_FILES) $(foreach e,$(ASSET_FILES),\
  $(firstword $(subst :, ,$(word 2,$(subst =, ,$(e))))))
web_quoted_entries = $(foreach e,$(web_asset_entries),'$(e)')

ALL_TARGETS += $(ASSETS_OBJ)
DEB_TEST_PACKAGES += chromium
DEPS_EXTRA += web-npm
TEST_TARGETS += test-browser

.PHONY: web-force web-npm test-browser

$(BUILD)/obj/tools/embed.o: tools/embed.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(EMBED): $(BUILD)/obj/tools/embed.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS_ALL) -o $@ $^

# The entry list is rewritten only when it changes, so adding or removing a
# file (which changes no source mtime) still regenerates the table. The
# scratch file is this shell's own: test targets that run at once
# (check-all) each make this rule.
$(BUILD)/gen/assets.list: web-force
	@mkdir -p $(@D)
	@printf '%s\n' $(web_quoted_entries) > $@.new.$$$$; \
	  if cmp -s $@.new.$$$$ $@; then rm -f $@.new.$$$$; \
	  else mv $@.new.$$$$ $@; fi

$(BUILD)/gen/assets.c: $(EMBED) $(BUILD)/gen/assets.list $(web_asset_srcs)
	@mkdir -p $(@D)
	$(EMBED) $@ $(web_quoted_entries)

$(ASSETS_OBJ): $(BUILD)/gen/assets.c service/http/assets.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# playwright-core only: it drives /usr/bin/chromium and never downloads a
# browser.
web-npm: npm-tool
	$(call npm_ci,tests/browser,PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1)

# Each test starts the real attnd on a free port, drives the page and kills
# the server. views.test.mjs answers POST /attend with canned answers
# (tests/browser/stub.mjs), so the drawing of the v2 views is tested
# whatever the service implements; dashboard.test.mjs goes end to end,
# v1 and v2. Both run; the target fails if either does.
test-browser: $(BUILD)/attnd web-npm
	@rc=0; \
	ATTND_BIN=$(abspath $(BUILD)/attnd) node tests/browser/views.test.mjs || rc=1; \
	ATTND_BIN=$(abspath $(BUILD)/attnd) \
	  SCREENSHOT=$(abspath $(BUILD)/dashboard.png) \
	  node tests/browser/dashboard.test.mjs || rc=1; \
	exit $$rc
