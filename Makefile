# The two commands of the README:
#   make demo   set everything up, convert a generated sample dataset, verify it, print a summary
#   make test   run the test suite (what .ci/run calls; it also builds the docs site, --strict)
# and:
#   make docs   serve the documentation site (docs/, mkdocs.yml) on http://127.0.0.1:8000
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_PROCS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: demo test test-core docs bench install clean tools

$(STAMP): setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m tfrecord_pipelines.demo

# Beyond pip: Debian's chromium, which tests/e2e/test_report_html.py opens report.html
# in (headless). Installed when missing; CI runs as root with apt-get.
tools:
	command -v chromium >/dev/null || (apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium)

# The suite on a process per core (pytest-xdist), then its multi-process runs again on Beam's own worker processes
# (the fallback when the zygote is off or Beam's version untested: pipelines/run/runtime.py).
test: $(STAMP) tools
	$(PY) -m pytest -q -n $(TEST_PROCS) tests
	TFRECORDS_SPEEDUPS=0 $(PY) -m pytest -q -m workers tests

# The pure core's tests alone, without Beam: well under a minute.
test-core: $(STAMP)
	$(PY) -m pytest -q -m core tests/unit

# MkDocs with Material; mkdocstrings renders docs/reference.md from the docstrings.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

bench: $(STAMP)
	$(PY) -m bench.run $(ARGS)

clean:
	rm -rf $(VENV) demo build site *.egg-info
