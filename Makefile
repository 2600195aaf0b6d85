PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test docs bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

demo: $(PY)
	$(PIP) install -e .
	$(PY) -m staticfield demo

test: $(PY)
	$(PIP) install -e '.[test,integration,typing,docs,bench]'
	$(PY) -m pytest

docs: $(PY)
	$(PIP) install -e '.[docs]'
	$(VENV)/bin/mkdocs build --strict

bench: $(PY)
	$(PIP) install -e '.[bench]'
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build dist src/*.egg-info
