# redis-unique: `make run` serves Redis with the module, `make test` runs every test.

PORT ?= 6379
MODULE := target/release/libredis_unique.so

.PHONY: run test build bench bench-scale loadgen fuzz fuzz-libfuzzer deps clean test-ruby bench-ruby

## run: build the module (release) and start redis-server with ./redis.conf on $(PORT)
run: deps build
	redis-server ./redis.conf --port $(PORT)

## test: formatting, lints, unit tests, integration tests and the redis-cli suite
test: deps test-ruby
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	cargo test

## test-ruby: the Ruby gem (clients/ruby) against real Sidekiq 6.4.1 and 7.3.9 processes, and its gem build
SHARED_RUBY ?= $(abspath ../shared/ruby)
test-ruby: deps
	cargo build --release --lib
	SHARED_RUBY=$(SHARED_RUBY) clients/ruby/test/run.sh

## bench-ruby: the gem's client and Sidekiq jobs/s against the Lua design of bench/lua (clients/ruby/bench)
bench-ruby: deps
	cargo build --release --lib
	ruby -Iclients/ruby/lib clients/ruby/bench/bench.rb

## build: the release module, $(MODULE)
build:
	cargo build --release

## bench: throughput, latency and memory against SET NX PX and the Lua design, also with a
## replica and AOF (bench/results/latest.json; BENCH_ROUNDS, default 5; BENCH_REQUESTS)
bench: deps build loadgen
	python3 bench/bench.py
	$(MAKE) bench-ruby

## bench-scale: LOCK/UNLOCK throughput and bytes per lock with 10,000,000 locks present
## against 1,000 (about 2 GB of memory; bench/results/scale.json)
bench-scale: deps build loadgen
	BENCH_SCALE=1 python3 bench/bench.py

## loadgen: the load generator of the benchmarks (bench/loadgen.rs)
loadgen:
	cargo build --release --example loadgen

## fuzz: the parser and decoder fuzz targets with many more cases (FUZZ_CASES, default 1000000)
fuzz:
	FUZZ_CASES=$${FUZZ_CASES:-1000000} cargo test --release --lib fuzz

## fuzz-libfuzzer: coverage-guided fuzzing of the same two parsers with cargo-fuzz
## (installed when missing; FUZZ_SECONDS per target, default 60; no allocation over 16 MB)
fuzz-libfuzzer:
	command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	RUSTC_BOOTSTRAP=1 cargo fuzz run decode -- -max_total_time=$${FUZZ_SECONDS:-60} -malloc_limit_mb=16
	RUSTC_BOOTSTRAP=1 cargo fuzz run lock_args -- -max_total_time=$${FUZZ_SECONDS:-60} -malloc_limit_mb=16

## deps: install redis-server, redis-tools and libclang-dev when missing
deps:
	@./scripts/deps.sh

clean:
	cargo clean
	rm -rf dump.rdb appendonlydir

## ---- Python client (clients/python): a venv that make creates, never the system Python
PY_VENV := clients/python/.venv

$(PY_VENV)/.installed: clients/python/pyproject.toml
	python3 -m venv $(PY_VENV) || { echo "python3 -m venv failed: on Debian, apt-get install -y python3-venv" >&2; exit 1; }
	$(PY_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PY_VENV)/bin/python -m pip install --quiet -e 'clients/python[test]'
	touch $@

.PHONY: python-venv test-python bench-python
## python-venv: clients/python/.venv with the package, its test extras, celery, rq and pytest
python-venv: $(PY_VENV)/.installed

## test-python: the Python client's tests (real redis-server, Celery and RQ workers)
test-python: deps python-venv
	cargo build --release --lib
	cd clients/python && .venv/bin/python -m pytest -q

## bench-python: lock+unlock pairs/s through redis-py, the client against the Lua design
bench-python: deps python-venv
	cargo build --release --lib
	$(PY_VENV)/bin/python clients/python/bench/bench.py

test: test-python
bench: bench-python
