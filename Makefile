PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

demo: $(PY)
	$(PIP) install -e .
	$(PY) -m staticfield demo

test: $(PY)
	$(PIP) install -e '.[test]'
	$(PY) -m pytest

bench: $(PY)
	$(PIP) install -e '.[bench]'
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build dist src/*.egg-info
