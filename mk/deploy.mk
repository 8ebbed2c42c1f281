# mk/deploy.mk: offline checks of the container image and the Kubernetes
# deployment (Dockerfile, deploy/, tests/deploy). No Docker engine or cluster
# is needed: the manifests are validated against the API types, the
# Dockerfile is linted and its runtime packages compared with what
# $(BUILD)/attnd links, and the binary is started as the container and the
# kubelet would start and probe it.
#
#   make test-deploy   the checks (after `make deps-test`)
#   make test-image    builds the Dockerfile without Docker (debootstrap'd
#                      Debian 12 root filesystems under $(BUILD)/image, RUN
#                      in a chroot) and runs the image read-only as its user;
#                      a few minutes and the Debian archive, so not part of
#                      `make test`

DEPLOY_DIR := tests/deploy
PROMTOOL := $(BUILD)/tools/prometheus/usr/bin/promtool
KUBECTL_DEBIAN := $(BUILD)/tools/kubernetes-client/usr/bin/kubectl

# iproute2: `ip link set lo up` in the private network namespace the runtime
# checks use, so attnd can listen on the image's own port 8080 without
# colliding with anything else on the machine.
DEB_TEST_PACKAGES += iproute2
DEPS_EXTRA += deploy-npm $(PROMTOOL) $(KUBECTL_DEBIAN)
TEST_TARGETS += test-deploy

IMAGE_DIR := $(BUILD)/image

.PHONY: deploy-npm test-deploy test-image

deploy-npm: npm-tool
	$(call npm_ci,$(DEPLOY_DIR),)

# Tools from Debian packages unpacked under $(BUILD)/tools and never
# installed: prometheus would also install and start a server, and
# kubernetes-client's kubectl would collide with a kubectl installed otherwise
# (as on the development machines). $(1): package, $@: the tool it holds.
define deploy_unpack
	@rm -rf $(BUILD)/tools/$(1).dl && mkdir -p $(BUILD)/tools/$(1).dl
	@cd $(BUILD)/tools/$(1).dl && \
	  { apt-get download $(1) >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get download $(1); }; }
	dpkg-deb -x $(BUILD)/tools/$(1).dl/$(1)_*.deb $(BUILD)/tools/$(1)
	@rm -rf $(BUILD)/tools/$(1).dl
	@test -x $@ && touch $@
endef

# promtool: `promtool check metrics` on attnd's /metrics.
$(PROMTOOL):
	$(call deploy_unpack,prometheus)

# Debian 12's kubectl 1.20 (kustomize v2.0.3): deploy/k8s must render with
# it as well as with a current kubectl.
$(KUBECTL_DEBIAN):
	$(call deploy_unpack,kubernetes-client)

# One node --test run over both files, inside a private network namespace
# when this user may make one (root), else on the host's network with an
# ephemeral port instead of the image's (test-runtime.mjs says so).
DEPLOY_TESTS := test-static.mjs test-runtime.mjs
test-deploy: $(BUILD)/attnd
	@test -d $(DEPLOY_DIR)/node_modules || \
	  { echo "tests/deploy: npm packages missing (make deps-extra)"; exit 1; }
	@test -x $(PROMTOOL) || { echo "promtool missing (make deps-extra)"; exit 1; }
	@test -x $(KUBECTL_DEBIAN) || { echo "Debian's kubectl missing (make deps-extra)"; exit 1; }
	@cd $(DEPLOY_DIR) && \
	  export ATTND_BIN=$(abspath $(BUILD)/attnd) PROMTOOL=$(abspath $(PROMTOOL)) \
	    KUBECTL_DEBIAN=$(abspath $(KUBECTL_DEBIAN)); \
	  if unshare --net true 2>/dev/null && command -v ip >/dev/null 2>&1; then \
	    ATTND_DEPLOY_NETNS=1 unshare --net -- sh -c \
	      'ip link set lo up && exec node --test $(DEPLOY_TESTS)'; \
	  else node --test $(DEPLOY_TESTS); fi

test-image: deploy-npm
	$(call install_missing,debootstrap iproute2)
	cd $(DEPLOY_DIR) && IMAGE_DIR=$(abspath $(IMAGE_DIR)) node build-image.mjs
	@cd $(DEPLOY_DIR) && IMAGE_DIR=$(abspath $(IMAGE_DIR)) ATTND_DEPLOY_NETNS=1 \
	  unshare --net -- sh -c 'ip link set lo up && exec node --test test-image.mjs'
