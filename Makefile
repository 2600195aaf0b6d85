# Every target runs in .venv, made from $(PYTHON) on first use (choose it with
# `PYTHON=python3.12 make test`). A .venv left half-made by a failed run (no
# pip in it) is noticed and made again; `make clean` starts over from nothing.
#
# The two ends CI tests (docs/support.md):
#   make test          the floor: the oldest JAX pyproject.toml allows, pinned in
#                      .ci/floor.txt (CI runs it on Python 3.11)
#   make test-newest   the newest JAX on Python 3.13, in its own .venv-newest
#                      (choose the interpreter with NEWEST_PYTHON=...)
PYTHON ?= python3
NEWEST_PYTHON ?= $(shell .ci/find-python 3.13)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
EXTRAS := test,integration,typing,docs,bench
VERSIONS := import sys, jax; print(f"testing jax {jax.__version__} on Python {sys.version.split()[0]}")

DIST ?= dist

.PHONY: venv demo test test-newest install-newest run-newest docs bench dist clean

venv:
	@if ! $(PY) -m pip --version >/dev/null 2>&1; then \
	  if [ -e $(VENV) ]; then echo "$(VENV) has no working pip: making it again with $(PYTHON)"; \
	  else echo "making $(VENV) with $(PYTHON)"; fi; \
	  $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	    echo "error: '$(PYTHON)' is not a Python 3.11+; choose one, e.g. PYTHON=python3.12 make $(MAKECMDGOALS)"; exit 1; }; \
	  rm -rf $(VENV); \
	  $(PYTHON) -m venv $(VENV) && $(PY) -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV); \
	    echo "error: '$(PYTHON) -m venv' did not make a venv with pip (on Debian/Ubuntu: apt install python3-venv;"; \
	    echo "or choose another Python, e.g. PYTHON=python3.12 make $(MAKECMDGOALS))"; exit 1; }; \
	fi

demo: venv
	$(PIP) install -e .
	$(PY) -m staticfield demo

test: venv
	$(PIP) install -c .ci/floor.txt -e '.[$(EXTRAS)]'
	@$(PY) -c '$(VERSIONS)'
	$(PY) -m pytest

# The same suite against the newest JAX: a venv of its own, upgraded on every run.
# install-newest makes and upgrades .venv-newest; run-newest runs the suite in it. The
# tests marked source_tree (they build from the checkout or copy it: the wheel, the
# Makefile, a fresh clone; none depends on JAX's version) run in `make test` only, so
# the two ends can run side by side in one checkout (.ci/run does).
test-newest: install-newest
	@$(MAKE) --no-print-directory run-newest

install-newest:
	@test -n "$(NEWEST_PYTHON)" || { echo "error: no Python 3.13 found; name one: NEWEST_PYTHON=/path/to/python3.13 make test-newest"; exit 1; }
	@$(NEWEST_PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null || { \
	  echo "error: '$(NEWEST_PYTHON)' is not a Python 3.12+ (the newest JAX needs one); name one: NEWEST_PYTHON=/path/to/python3.13 make test-newest"; exit 1; }
	@$(MAKE) --no-print-directory venv VENV=.venv-newest PYTHON=$(NEWEST_PYTHON)
	.venv-newest/bin/python -m pip --disable-pip-version-check -q install --upgrade --upgrade-strategy eager -e '.[$(EXTRAS)]'

run-newest:
	@.venv-newest/bin/python -c '$(VERSIONS)'
	.venv-newest/bin/python -m pytest -m "not source_tree"

docs: venv
	$(PIP) install -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict  # see mkdocs.yml: theme

bench: venv
	$(PIP) install -e '.[bench]'
	$(PY) -m benchmarks

# A wheel to install into another project: pip install dist/staticfield-*.whl
dist: venv
	rm -f $(DIST)/staticfield-*.whl
	$(PIP) wheel --no-deps --wheel-dir $(DIST) .
	@ls $(DIST)/staticfield-*.whl

clean:
	rm -rf $(VENV) .venv-newest build dist site src/*.egg-info
