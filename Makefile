# redis-unique: `make run` serves Redis with the module, `make test` runs every test.

PORT ?= 6379
MODULE := target/release/libredis_unique.so

.PHONY: run test build bench fuzz deps clean

## run: build the module (release) and start redis-server with ./redis.conf on $(PORT)
run: deps build
	redis-server ./redis.conf --port $(PORT)

## test: formatting, lints, unit tests, integration tests and the redis-cli suite
test: deps
	cargo fmt --all -- --check
	cargo clippy --all-targets -- -D warnings
	cargo test

## build: the release module, $(MODULE)
build:
	cargo build --release

## bench: throughput, latency and memory against SET NX PX and the Lua design (bench/results/latest.json)
bench: deps build
	python3 bench/bench.py

## fuzz: the parser and decoder fuzz targets with many more cases (FUZZ_CASES, default 1000000)
fuzz:
	FUZZ_CASES=$${FUZZ_CASES:-1000000} cargo test --release --lib fuzz

## deps: install redis-server, redis-tools and libclang-dev when missing
deps:
	@./scripts/deps.sh

clean:
	cargo clean
	rm -rf dump.rdb appendonlydir
