# The two commands of the README:
#   make demo   set everything up, convert a generated sample dataset, verify it, print a summary
#   make test   run the test suite (what .ci/run calls)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench install clean

$(STAMP): setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m pipelines.demo

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) -m bench.run $(ARGS)

clean:
	rm -rf $(VENV) demo build *.egg-info
