# Every target runs in .venv, made from $(PYTHON) on first use (choose it with
# `PYTHON=python3.12 make test`). A .venv left half-made by a failed run (no
# pip in it) is noticed and made again; `make clean` starts over from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

DIST ?= dist

.PHONY: venv demo test docs bench dist clean

venv:
	@if ! $(PY) -m pip --version >/dev/null 2>&1; then \
	  if [ -e $(VENV) ]; then echo "$(VENV) has no working pip: making it again with $(PYTHON)"; \
	  else echo "making $(VENV) with $(PYTHON)"; fi; \
	  $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null || { \
	    echo "error: '$(PYTHON)' is not a Python 3.10+; choose one, e.g. PYTHON=python3.12 make $(MAKECMDGOALS)"; exit 1; }; \
	  rm -rf $(VENV); \
	  $(PYTHON) -m venv $(VENV) && $(PY) -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV); \
	    echo "error: '$(PYTHON) -m venv' did not make a venv with pip (on Debian/Ubuntu: apt install python3-venv;"; \
	    echo "or choose another Python, e.g. PYTHON=python3.12 make $(MAKECMDGOALS))"; exit 1; }; \
	fi

demo: venv
	$(PIP) install -e .
	$(PY) -m staticfield demo

test: venv
	$(PIP) install -e '.[test,integration,typing,docs,bench]'
	$(PY) -m pytest

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
	rm -rf $(VENV) build dist site src/*.egg-info
