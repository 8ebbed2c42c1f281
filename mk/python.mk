# mk/python.mk: the Python client (clients/python, package attnd).
#
#   make test-python   a venv under $(BUILD)/venv that sees Debian's numpy,
#                      torch and pytest (--system-site-packages), the client
#                      installed into it offline from a copy of its sources
#                      (so the build writes nothing into clients/python),
#                      then its pytest suite against $(BUILD)/attnd
#
# Offline: pip gets --no-index (numpy is already there, from Debian) and
# --no-build-isolation (setuptools and wheel from Debian build it, instead
# of copies fetched from PyPI). PYTEST_ARGS passes options to pytest
# (-k mha, -x, ...).

PY_SYS := /usr/bin/python3
PY_VENV := $(BUILD)/venv
PY_SRC_COPY := $(BUILD)/python-src
PYTEST_ARGS ?=
# python3-venv brings the pip the venv gets (python3-pip-whl); setuptools
# and wheel build the package without a download.
DEB_TEST_PACKAGES += python3 python3-venv python3-setuptools python3-wheel \
                     python3-numpy python3-torch python3-pytest
TEST_TARGETS += test-python

.PHONY: test-python

$(PY_VENV)/bin/python:
	rm -rf $(PY_VENV)
	$(PY_SYS) -m venv --system-site-packages $(PY_VENV)

test-python: $(BUILD)/attnd $(PY_VENV)/bin/python
	rm -rf $(PY_SRC_COPY)
	mkdir -p $(PY_SRC_COPY)
	cp -r clients/python/pyproject.toml clients/python/README.md \
	  clients/python/src $(PY_SRC_COPY)/
	PIP_DISABLE_PIP_VERSION_CHECK=1 $(PY_VENV)/bin/python -m pip install \
	  --quiet --no-index --no-build-isolation --no-cache-dir \
	  $(PY_SRC_COPY)
	cd clients/python && ATTND_BIN=$(abspath $(BUILD)/attnd) \
	  PYTHONDONTWRITEBYTECODE=1 $(abspath $(PY_VENV))/bin/python -m pytest \
	  -p no:cacheprovider -q tests $(PYTEST_ARGS)
