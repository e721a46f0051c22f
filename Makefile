# epochq: `make demo` runs the engine on a local Kafka; `make test` runs the static checks and the whole suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test check unit integration jars chromium screenshots bench bench-peers clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,otel]'
	touch $(STAMP)

jars: $(STAMP)
	$(BIN)/python -c "from engine.broker.fetch import ensure_jars; print('kafka jars:', ensure_jars())"

test: jars chromium check  # two test processes, each module whole in one (its shared fixtures), each with its own broker
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

check: $(STAMP)  # the static checks (pyproject.toml): lint, types, layering; any failure fails `make test`
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache --no-logo

chromium:  # the browser tests (tests/integration/browser) drive Debian's Chromium: no browser download is possible
	test -x /usr/bin/chromium || { $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

screenshots: jars chromium  # the browser tests, writing docs/console/*.png (docs/console.md)
	EPOCHQ_SCREENSHOTS=$(CURDIR)/docs/console $(BIN)/python -m pytest -q tests/integration/browser

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

integration: jars chromium
	$(BIN)/python -m pytest -q -n 2 --dist loadfile tests/integration

demo: jars
	$(BIN)/python -m examples.demo $(if $(CONSOLE),--console)

bench: jars  # the quick figures (minutes); docs/benchmarks.md and docs/time.md give the large runs' flags
	$(BIN)/python bench/codec_bench.py
	$(BIN)/python bench/submit_bench.py --jobs 30000 --runs 3
	$(BIN)/python bench/noop_throughput.py --jobs 10000 --runs 1
	$(BIN)/python bench/fairness.py --seconds 10
	$(BIN)/python bench/time_router.py --jobs 100000 --due-rate 1000 --due-seconds 30 --lead 40

PEERS := bench/peers
PEERS_FLAGS ?= --runs 3 --engine-args='--concurrency 256' --engine-args='--processes 2'

$(PEERS)/node_modules/.package-lock.json: $(PEERS)/package-lock.json
	cd $(PEERS) && npm ci --no-audit --no-fund

bench-peers: jars $(PEERS)/node_modules/.package-lock.json  # BullMQ beside epochq (docs/benchmarks.md); PEERS_FLAGS='--runs 1 --jobs 2000' for a quick look
	command -v redis-server >/dev/null || { apt-get update && apt-get install -y redis-server; }
	$(BIN)/python $(PEERS)/compare.py $(PEERS_FLAGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
