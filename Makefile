# The two commands of the README's quick start, and the venv they share.
# `make demo` installs (once) and runs the main job on generated demo data;
# `make test` installs (once) and runs the test suite.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint browser

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@$(MAKE) --no-print-directory browser
	touch $(STAMP)

# Headless Chromium for the test that screenshots report.html (it skips, saying why, without one).
# Installed only where it can be without asking: as root with apt-get (CI); never fails the build.
BROWSERS := chromium-headless-shell chrome-headless-shell chromium chromium-browser google-chrome
browser:
	@found=""; for b in $(BROWSERS); do command -v $$b >/dev/null 2>&1 && found=$$b && break; done; \
	if [ -n "$$found" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium-headless-shell with apt-get (for the report screenshot test)"; \
	  (apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends chromium-headless-shell >/dev/null 2>&1) \
	  || (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1) \
	  || echo "note: could not install a headless Chromium; the report screenshot test will skip"; \
	else \
	  echo "note: no headless Chromium and no root apt-get; the report screenshot test will skip"; \
	fi

demo: $(STAMP)
	$(BIN)/biasboard demo

# One pytest worker per core (at most 4), a test file per worker at a time: the file's module fixtures (a GCS
# emulator, a simulated log) are made once, and the suite takes about half the time on a 2-core machine.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile

lint: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_lint.py
