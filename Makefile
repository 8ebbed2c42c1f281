# Makefile: attnd, a transformer-attention service.
#
#   make run    install what is missing (as root on Debian 12), build, serve
#               on :8080 with the dashboard
#   make test   install what is missing, build, run every check (unit tests,
#               sanitizer build, service, browser and deployment checks)
#
# Everything is built under $(BUILD); sanitizer builds use their own folder
# (build/asan for SAN=1, ASan+UBSan; build/tsan for SAN=thread) so flags
# never mix. Each part of the project adds its rules,
# its Debian packages and its test targets in mk/<part>.mk.

BUILD ?= build
SAN ?=
PREFIX ?= /usr/local

CSTD := -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
        -Wmissing-prototypes -Wvla -Wformat=2
ifeq ($(SAN),1)
  OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
         -fno-sanitize-recover=all
  HARDEN := -fPIE
  LDSAN := -fsanitize=address,undefined
else ifeq ($(SAN),thread)
  OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
  HARDEN := -fPIE
  LDSAN := -fsanitize=thread
else
  OPT := -O2 -g
  HARDEN := -D_FORTIFY_SOURCE=2 -fstack-protector-strong -fPIE
  LDSAN :=
endif
CFLAGS_ALL = $(CSTD) $(WARN) $(OPT) $(HARDEN) -Ilib/include -Iservice \
             $(EXTRA_CFLAGS) -MMD -MP
LDFLAGS_ALL = -pie -Wl,-z,relro,-z,now $(LDSAN) $(EXTRA_LDFLAGS)

# Debian packages. DEB_PACKAGES are needed to build and run; DEB_TEST_PACKAGES
# only by `make test` and the benchmarks. Fragments append to both.
DEB_PACKAGES := make gcc pkg-config libopenblas-dev libmicrohttpd-dev \
                libjansson-dev
DEB_TEST_PACKAGES := check clang libclang-rt-14-dev valgrind curl
TEST_TARGETS :=
ALL_TARGETS :=
# What the test targets run, built before the first of them (test-bins):
# files under $(BUILD), build/asan (SAN=1) and build/tsan (SAN=thread),
# named relative to that folder; TEST_BUILDS: targets that build more.
TEST_BINS :=
TEST_BINS_ASAN :=
TEST_BINS_TSAN :=
TEST_BUILDS :=
DEPS_EXTRA :=

.DEFAULT_GOAL := all

# The fragments, in an order that lets every rule name its prerequisites
# directly: make expands a rule's prerequisites as it reads the rule, so a
# fragment comes after the fragments whose variables its rules use, and
# after those that append to a list it reads.
#   lib, tests-lib  libattn (BLAS_CFLAGS, BLAS_LIBS) and its suites
#   bench           BENCH_DEB_PACKAGES, which codec.mk appends to
#   codec           the reader's C++ shim in SERVICE_EXTRA_OBJS; CODEC_OBJS
#   store           STORE_OBJS, STORE_LIBS
#   service         SERVICE_OBJS (the store's included), SERVICE_LIBS,
#                   SERVICE_MAIN_OBJ, ASSETS_OBJ, its ASSET_FILES
#   web             ASSETS_OBJ made from web/ and every ASSET_FILES entry
#   robust          fuzz harnesses linking the service's objects
#   the rest        use no other fragment's variables in their rules
include mk/lib.mk
include mk/tests-lib.mk
include mk/bench.mk
include mk/codec.mk
include mk/store.mk
include mk/service.mk
include mk/web.mk
include mk/robust.mk
include mk/deploy.mk mk/docs.mk mk/families.mk mk/python.mk mk/v1.mk \
        mk/contract.mk
MK_UNLISTED := $(filter-out $(MAKEFILE_LIST),$(wildcard mk/*.mk))
ifneq ($(MK_UNLISTED),)
  $(error $(MK_UNLISTED): not in the Makefile's list of fragments)
endif

# -- objects ------------------------------------------------------------------

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(CFLAGS_$(patsubst %/,%,$(dir $<))) -c $< -o $@

-include $(shell find $(BUILD)/obj $(BUILD)/pic -name '*.d' 2>/dev/null)

# -- entry points -------------------------------------------------------------

.PHONY: all run test check-all deps deps-test deps-extra clean install serve \
        npm-tool \
        test-clang test-bins test-bins-asan test-bins-tsan

all: $(ALL_TARGETS)

run: deps
	@$(MAKE) --no-print-directory serve

test: deps-test
	@$(MAKE) --no-print-directory check-all

# Builds what the tests run (test-bins, TEST_JOBS at a time); runs the
# test targets that measure no time TEST_JOBS at a time, each into its log
# (build/test-logs/<target>.log), printed whole when it ends; then the
# others (TEST_ALONE) in turn with nothing beside them. Stops at the first
# failure; says how long each took, so a slow one shows in CI's log.
# TEST_SHARED_FIRST: the long ones, started first so the last to end is
# a short one.
# test-service-asan is alone too: its http suite waits on the server's
# deadlines and slow clients, as test-service's does.
TEST_ALONE := test-service test-service-asan test-service-tsan \
              test-browser test-valgrind-service test-shutdown-load \
              test-hostile test-deploy test-store-model
TEST_SHARED_FIRST := test-fuzz-corpus test-shortest-all test-lib-asan \
                     test-python test-combos
TEST_SHARED = $(filter $(TEST_TARGETS),$(TEST_SHARED_FIRST)) \
              $(filter-out $(TEST_ALONE) $(TEST_SHARED_FIRST),$(TEST_TARGETS))
TEST_LOGS := build/test-logs
check-all:
	@set -e; all0=$$(date +%s); \
	echo "==> test-bins"; \
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target test-bins; \
	echo "<== test-bins: $$(( $$(date +%s) - all0 )) s"; \
	rm -rf $(TEST_LOGS); mkdir -p $(TEST_LOGS); \
	echo "==> $(TEST_JOBS) at a time: $(strip $(TEST_SHARED))"; t0=$$(date +%s); \
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=recurse \
	  $(addprefix check-one-,$(TEST_SHARED)) || \
	  { echo "==> make test FAILED (the target marked FAILED above)"; exit 1; }; \
	echo "<== $(TEST_JOBS) at a time: $$(( $$(date +%s) - t0 )) s"; \
	for t in $(filter $(TEST_ALONE),$(TEST_TARGETS)); do \
	  echo "==> $$t"; t0=$$(date +%s); \
	  $(MAKE) --no-print-directory $$t || \
	  { echo "==> make test FAILED: $$t"; exit 1; }; \
	  echo "<== $$t: $$(( $$(date +%s) - t0 )) s"; done; \
	echo "==> all checks passed in $$(( $$(date +%s) - all0 )) s:" \
	  "$(TEST_TARGETS)"

# One test target for check-all, its output into its log, printed whole
# when it ends (check-all's --output-sync keeps two from mixing). Without
# MAKEFLAGS (the jobserver), its own sub-makes run one thing at a time, as
# they do on their own.
check-one-%:
	@t0=$$(date +%s); log=$(TEST_LOGS)/$*.log; \
	if MAKEFLAGS= $(MAKE) --no-print-directory $* > $$log 2>&1; then \
	  echo "==> $*"; cat $$log; \
	  echo "<== $*: $$(( $$(date +%s) - t0 )) s"; \
	else rc=$$?; echo "==> $*"; cat $$log; \
	  echo "<== $*: FAILED (exit $$rc) after $$(( $$(date +%s) - t0 )) s;" \
	    "log: $$log"; exit 1; fi

# Installs missing Debian packages when run as root; otherwise names them.
define install_missing
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | \
	    grep -q 'install ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -q >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	      --no-install-recommends $$missing >/dev/null || exit 1; \
	  else echo "missing Debian packages:$$missing (run as root)"; exit 1; fi; \
	fi
endef

deps:
	$(call install_missing,$(DEB_PACKAGES))

# npm from Debian only when the machine has none: a node from elsewhere
# brings its own npm, which Debian's would conflict with.
npm-tool:
	@if ! command -v npm >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing: nodejs npm"; \
	    apt-get update -q >/dev/null && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	      --no-install-recommends nodejs npm >/dev/null || exit 1; \
	  else echo "missing: npm (apt-get install nodejs npm)"; exit 1; fi; \
	fi

# `npm ci` in folder $(1) (with environment $(2)) when its lock file is
# newer than what is installed.
define npm_ci
	@if [ ! -f $(1)/node_modules/.package-lock.json ] || \
	    [ $(1)/package-lock.json -nt $(1)/node_modules/.package-lock.json ]; \
	  then cd $(1) && $(2) npm ci --no-audit --no-fund --loglevel=error; fi
endef

deps-test: deps
	$(call install_missing,$(DEB_TEST_PACKAGES))
	@$(MAKE) --no-print-directory deps-extra

# Non-Debian test dependencies (npm packages, unpacked tools), from fragments.
deps-extra: $(DEPS_EXTRA)

# gcc builds everything above; clang must build it warning-free too.
TEST_TARGETS += test-clang
test-clang:
	$(MAKE) --no-print-directory CC=clang BUILD=build/clang all

# Every binary the test targets use, each build folder by one make (two
# never write the same file), TEST_JOBS compilers at a time. A test target
# run on its own still builds what it lacks.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
TEST_BUILDS += test-clang
test-bins: all $(addprefix $(BUILD)/,$(TEST_BINS)) test-bins-asan \
           test-bins-tsan $(TEST_BUILDS)

test-bins-asan:
	$(MAKE) --no-print-directory BUILD=build/asan SAN=1 \
	  $(addprefix build/asan/,$(TEST_BINS_ASAN))

test-bins-tsan:
	$(MAKE) --no-print-directory BUILD=build/tsan SAN=thread \
	  $(addprefix build/tsan/,$(TEST_BINS_TSAN))

clean:
	rm -rf build
