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

.PHONY: demo test test-core test-beam-oldest docs bench install clean tools

# A second virtualenv with the oldest Beam of setup.py's range: constraints.txt with only
# the pins constraints-beam-oldest.txt changes (what that Beam requires). It starts as hard
# links to .venv's packages, so pip downloads and installs only what differs (the registry's
# files are not kept in pip's cache here: a second install from nothing is ~10 min more).
OLD_VENV := .venv-beam-oldest
OLD_PY := $(OLD_VENV)/bin/python
OLD_STAMP := $(OLD_VENV)/.installed
SITE = $(shell $(PYTHON) -c 'import sys; print("lib/python%d.%d/site-packages" % sys.version_info[:2])')

$(STAMP): setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"
	$(PY) -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

$(OLD_STAMP): $(STAMP) constraints-beam-oldest.txt
	rm -rf $(OLD_VENV)
	$(PYTHON) -m venv --without-pip $(OLD_VENV)
	rm -rf $(OLD_VENV)/$(SITE)
	cp -al $(VENV)/$(SITE) $(OLD_VENV)/$(SITE)
	awk -F'==' 'NR==FNR { if ($$0 ~ /^[^#].*==/) drop[tolower($$1)] = 1; next } !(tolower($$1) in drop)' \
		constraints-beam-oldest.txt constraints.txt > $(OLD_VENV)/constraints.txt
	grep -v '^#' constraints-beam-oldest.txt >> $(OLD_VENV)/constraints.txt
	$(OLD_PY) -m pip install --quiet -c $(OLD_VENV)/constraints.txt -e ".[test]"
	$(OLD_PY) -m pip check
	touch $(OLD_STAMP)

# The tests marked beam_range (conversion, byte identity, incremental runs, the PTransforms,
# installing beside a Beam) on the oldest Beam: outside the speed layer's tested versions.
test-beam-oldest: $(OLD_STAMP)
	$(OLD_PY) -m pytest -q -n $(TEST_PROCS) -m beam_range tests

demo: $(STAMP)
	$(PY) -m tfrecord_pipelines.demo

# Beyond pip: Debian's chromium, which tests/e2e/test_report_html.py opens report.html
# in (headless). Installed when missing; CI runs as root with apt-get.
tools:
	command -v chromium >/dev/null || (apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium)

# The suite on a process per core (pytest-xdist), then its multi-process runs again on Beam's own worker processes
# (the fallback when the speed layer is off or Beam's version untested: pipelines/run/runtime.py), then the
# beam_range tests on the oldest Beam of setup.py's range. test_beam_range.py runs both virtualenvs' Beams
# itself (its own subprocesses): once, in test-beam-oldest.
test: $(STAMP) $(OLD_STAMP) tools
	$(PY) -m pytest -q -n $(TEST_PROCS) --ignore tests/e2e/test_beam_range.py tests
	TFRECORDS_SPEEDUPS=0 $(PY) -m pytest -q -m workers --ignore tests/e2e/test_beam_range.py tests
	$(MAKE) test-beam-oldest

# The pure core's tests alone, without Beam: well under a minute.
test-core: $(STAMP)
	$(PY) -m pytest -q -m core tests/unit

# MkDocs with Material; mkdocstrings renders docs/reference.md from the docstrings.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

bench: $(STAMP)
	$(PY) -m bench.run $(ARGS)

clean:
	rm -rf $(VENV) $(OLD_VENV) demo build site *.egg-info
