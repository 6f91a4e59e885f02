# redis-unique: `make run` serves Redis with the module, `make test` runs every test.

PORT ?= 6379
MODULE := target/release/libredis_unique.so
# What make dist ships and every make bench* measures (make build-pgo, below).
PGO_MODULE := target/pgo/libredis_unique.so
# The Node package's build (dist/), made once by the first suite that needs it.
NODE_DIST := clients/node/dist/.built

.PHONY: run test build build-pgo bench bench-plots bench-floor bench-cell bench-scale bench-many bench-waiters loadgen fuzz fuzz-libfuzzer deps clean test-ruby bench-ruby test-valgrind soak test-partition lint

## run: build the module (release) and start redis-server with ./redis.conf on $(PORT)
run: deps build
	redis-server ./redis.conf --port $(PORT) --loadmodule $(abspath $(MODULE))

## Every suite runs in an order drawn from TEST_SEED (0 to 65534, minitest's range): a fresh
## one per `make` run, printed; `make test TEST_SEED=1234` replays that order. Each suite runs
## through .ci/suite, which keeps its log in target/ci/ and, when it fails, names the suite, the
## failed tests, the seed and the server (target/ci/failures; .ci/run prints it last).
ifndef TEST_SEED
TEST_SEED := $(shell od -An -N2 -tu2 /dev/urandom | awk '{ print $$1 % 65535 }')
endif
export TEST_SEED
SUITE := $(CURDIR)/.ci/suite

## test: lints first (they fail in seconds), then the suites in two lanes side by side: the
## Rust tests, the Python and the Node clients in one, the gem on every Sidekiq in the other
## (.ci/lanes: each lane's output whole when it ends; TEST_LANES=1 runs them one by one)
TEST_LANES ?= 2
test: deps lint $(MODULE) python-venv node-deps $(NODE_DIST)
ifeq ($(TEST_LANES),1)
	$(MAKE) --no-print-directory test-rust test-python test-python-functions test-node test-ruby
else
	.ci/lanes --name test "$(MAKE) --no-print-directory test-rust test-python test-python-functions test-node" \
		"$(MAKE) --no-print-directory test-ruby"
endif
	@echo "== make test passed (TEST_SEED=$(TEST_SEED))"

# The release module the client suites load, rebuilt when a source of it changes (a file
# rule, so that a suite started beside the Rust tests' build does not wait for cargo's lock).
$(MODULE): $(shell find src -name '*.rs') Cargo.toml Cargo.lock
	cargo build --release --lib

## lint: cargo fmt, clippy and rustdoc's links (warnings are errors)
lint:
	@echo "== TEST_SEED=$(TEST_SEED)"
	$(SUITE) fmt -- cargo fmt --all -- --check
	$(SUITE) clippy -- cargo clippy --all-targets -- -D warnings
	$(SUITE) rustdoc -- env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet

## test-ruby: the Ruby gem (clients/ruby) against real Sidekiq 6.4.1, 7.3.9 and 8.1.7 (Ruby 3.3,
## built once from ../shared/ruby) processes, and its gem build; SIDEKIQ_VERSIONS="6 7 8" picks
SHARED_RUBY ?= $(abspath ../shared/ruby)
SIDEKIQ_VERSIONS ?= 6 7 8
# The gem's test files (default: all); test-compat leaves out the server-independent ones.
RUBY_TESTS ?=
test-ruby: deps $(MODULE)
	SHARED_RUBY=$(SHARED_RUBY) SIDEKIQ_VERSIONS="$(SIDEKIQ_VERSIONS)" \
		$(SUITE) ruby -- clients/ruby/test/run.sh $(RUBY_TESTS)

## bench-ruby: the gem's client and Sidekiq jobs/s against the Lua design of bench/lua (clients/ruby/bench)
bench-ruby: deps build-pgo
	REDIS_UNIQUE_MODULE=$(CURDIR)/$(PGO_MODULE) ruby -Iclients/ruby/lib clients/ruby/bench/bench.rb

## test-valgrind: the integration tests of the module's unsafe paths with every server under
## valgrind memcheck: Redis 7.2.6 built with MALLOC=libc (scripts/valgrind-server.sh), so that
## valgrind sees its heap and the module's, which takes every block from it as in production
## (src/ffi/alloc.rs: RedisModule_Alloc, Calloc, Realloc; a line-tables build, target/valgrind);
## fails on invalid reads/writes/frees, uninitialised memory or a block definitely lost through
## the module (scripts/valgrind-check.sh reads one log per server, in target/valgrind/logs)
VALGRIND_TESTS ?= commands durability forged waiting reaping reaper_scan metrics replication rate modes fair lockall
# Skipped: a million reaper visits measured on used_memory (tests/reaper_scan.rs is the valgrind
# walk), four tests whose leases of 30-150 ms end before a server under valgrind has served
# the next command, and the rate's waiters test, which times their grants to the 100 ms.
VALGRIND_SKIP ?= --skip the_reaper_gives_back_what_it_scans \
	--skip a_crashed_jobs_lock_frees_itself_when_the_lease_ends \
	--skip an_expired_holder_is_invisible_and_frees_its_slot \
	--skip a_lease_running_out_serves_a_waiter_with_no_other_command \
	--skip a_replica_matches_its_primary_after_waiters_were_served \
	--skip waiters_refused_by_the_rate_are_served_in_arrival_order_when_it_allows
test-valgrind: deps
	CARGO_TARGET_DIR=target/valgrind CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
		cargo build --release --lib
	rm -rf target/valgrind/logs && mkdir -p target/valgrind/logs
	REDIS_SERVER="$$(scripts/locked-build redis-7.2.6-libc)" \
	REDIS_UNIQUE_MODULE=$(CURDIR)/target/valgrind/release/libredis_unique.so \
	REDIS_VALGRIND=$(CURDIR)/target/valgrind/logs \
		$(SUITE) valgrind -- cargo test --no-fail-fast $(addprefix --test ,$(VALGRIND_TESTS)) -- $(VALGRIND_SKIP)
	$(SUITE) valgrind-check -- ./scripts/valgrind-check.sh target/valgrind/logs

## soak: a million contended LOCK/renew/UNLOCK/WAIT operations with a fenced resource through
## Sentinel failovers (primary, 2 replicas, 3 Sentinels), then again with WAIT 1 100 after LOCK;
## SOAK_OPS per run (default 1000000). Figures: docs/operations.md. Not part of `make test`.
soak: deps build
	cargo run --quiet --example soak -- --ops $${SOAK_OPS:-1000000}
	cargo run --quiet --example soak -- --ops $${SOAK_OPS:-1000000} --wait-replicas

## test-partition: fencing tokens through real network partitions (iptables rules on 127.0.0.x,
## removed on every exit; needs root): Sentinel and Redis Cluster setups, the default
## configuration, min-replicas-to-write 1 and WAIT 1 100 after LOCK; fails on a stale write
## accepted or an equal token. PARTITION_ARGS adds arguments (--partition-seconds, --setups,
## --configs). Figures: docs/operations.md. Not part of `make test`.
test-partition: deps build
	python3 tests/partition/run.py $(PARTITION_ARGS)

## build: the release module, $(MODULE)
build:
	cargo build --release

## build-pgo: the release module built with profile-guided optimisation, $(PGO_MODULE):
## scripts/pgo.sh runs an instrumented build on bench/pgo_train.py's workload (a real primary
## and replica), then the build uses that profile. What make dist ships and make bench measures.
# The build names its target, as the profiling build does (scripts/pgo.sh); the module is then
# moved into place as a new file, so that a server that has the old one loaded keeps it intact.
HOST := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
build-pgo: $(PGO_MODULE)
$(PGO_MODULE): $(shell find src -name '*.rs') Cargo.toml Cargo.lock scripts/pgo.sh bench/pgo_train.py bench/loadgen.rs
	scripts/pgo.sh >/dev/null
	RUSTFLAGS="-Cprofile-use=$(CURDIR)/target/pgo/$(HOST)/merged.profdata" \
		cargo build --release --lib --target $(HOST) --target-dir target/pgo/build
	cp target/pgo/build/$(HOST)/release/libredis_unique.so $@.new && mv $@.new $@

## bench: throughput, latency and memory against SET NX PX and the Lua design (and RATE against
## GCRA in Lua), also with a replica and AOF (bench/results/latest.json; BENCH_ROUNDS, default 5;
## BENCH_REQUESTS); BENCH_SERVERS=all (or a list) compares on every test-compat server too
## (bench/results/servers.json)
bench: deps build-pgo loadgen
	python3 bench/bench.py
	python3 bench/floor.py
	python3 bench/cell.py
	$(MAKE) bench-ruby
	$(MAKE) --no-print-directory bench-plots

## bench-plots: the charts of docs/img/ drawn from bench/results/*.json and the Node client's
## contended run (bench/plots.py, matplotlib in the bench's venv bench/.venv, made here)
BENCH_VENV := bench/.venv
$(BENCH_VENV)/.installed: bench/requirements.txt
	python3 -m venv $(BENCH_VENV) || { echo "python3 -m venv failed: on Debian, apt-get install -y python3-venv" >&2; exit 1; }
	$(BENCH_VENV)/bin/python -m pip install --quiet -r bench/requirements.txt
	touch $@

bench-plots: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python bench/plots.py

## bench-floor: UNIQUE.LOCK/UNLOCK against the floor (bench/floor/floor.c, the least a lock module
## command can do, built against each server's redismodule.h) and SET NX PX / DEL: throughput
## and instructions per request under callgrind, per server (FLOOR_SERVERS; bench/results/floor.json)
bench-floor: deps build-pgo loadgen
	python3 bench/floor.py

## bench-cell: UNIQUE.LOCK ... RATE against redis-cell 0.5.0's CL.THROTTLE (built from its git tag
## into target/redis-cell, once; skipped with the reason when it cannot be): throughput pipelined
## and not, on fresh keys and on a hot key that denies, and instructions per request under
## callgrind (CELL_ROUNDS, CELL_CG_REQUESTS, REDIS_CELL_GIT; bench/results/cell.json)
bench-cell: deps build-pgo loadgen
	python3 bench/cell.py

## bench-scale: LOCK/UNLOCK throughput and bytes per lock with 10,000,000 locks present
## against 1,000 (about 2 GB of memory; bench/results/scale.json)
bench-scale: deps build-pgo loadgen
	BENCH_SCALE=1 python3 bench/bench.py

## bench-many: one key of 1 to 100,000 holders (renewal, grant+release, denial at LIMIT)
## against redis-semaphore's sorted set in Lua, on the redis-server on the PATH and on each of
## BENCH_SERVERS (bench/results/many.json); `make bench` runs it on the first server too.
## MANY_SIZES="1000 100000" MANY_COMMANDS="renewal denial": only those (each beside a one-holder key)
bench-many: deps build-pgo loadgen
	BENCH_MANY=1 python3 bench/bench.py

## bench-waiters: the server's CPU per release and per LOCK arriving with 1 to 10,000 clients
## waiting on the key, in no group and in 1,000 groups (also on a key of LIMIT 30, past and
## beside groups at their GROUPLIMIT, past waiters of a PXAT lease; behind a writer, or a
## LOCKALL), per pass serving 100 of them, and how late a lease's end on a key of 100,000
## holders serves a waiter (bench/many_waiters.py; MANY_WAITERS_GROUPS="0 4": other group
## counts; MANY_WAITERS_CALLGRIND=1: the module's instructions instead, under callgrind)
bench-waiters: build-pgo
	python3 bench/many_waiters.py

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

.PHONY: python-venv test-python test-python-functions bench-python
## python-venv: clients/python/.venv with the package, its test extras, celery, rq and pytest
python-venv: $(PY_VENV)/.installed

## test-python: the Python client's tests (real redis-server, Celery and RQ workers);
## PYTEST_ARGS adds pytest arguments
PYTEST_ARGS ?=
test-python: deps python-venv $(MODULE)
	cd clients/python && $(SUITE) python -- .venv/bin/python -m pytest -q -p randomly --randomly-seed=$(TEST_SEED) $(PYTEST_ARGS)

## test-python-functions: the Celery and RQ workers, the locks and the client on a server
## started WITHOUT the module, so every call goes through the Functions library
## (functions/redis_unique.lua); test-python runs the library's own tests and the differential
## test against the module (tests/test_functions*.py)
FUNCTIONS_TESTS ?= tests/test_celery.py tests/test_rq.py tests/test_lock.py
test-python-functions: deps python-venv
	cd clients/python && REDIS_UNIQUE_TEST_BACKEND=functions $(SUITE) python-functions -- \
		.venv/bin/python -m pytest -q -p randomly --randomly-seed=$(TEST_SEED) $(FUNCTIONS_TESTS)

## bench-python: lock+unlock pairs/s through redis-py, the client against the Lua design
bench-python: deps python-venv build-pgo
	REDIS_UNIQUE_MODULE=$(CURDIR)/$(PGO_MODULE) $(PY_VENV)/bin/python clients/python/bench/bench.py

bench: bench-python

## ---- Every supported server: Redis 7.0 is the redis-server on the PATH (`make test`);
## test-compat builds Redis 7.2.6 and 8.0.6 and Valkey 8.0.1 and 9.1.2 once from
## ../shared/servers/ (cached in ~/.cache/redis-unique-servers) and runs every suite of
## COMPAT_SUITES on each, with its own redis-cli. A suite joins by reading REDIS_SERVER (the
## server binary) and REDIS_UNIQUE_MODULE (the module to load): the Rust suite and each
## client's test-NAME (clients/NAME) do. The gem runs there with Sidekiq 8.1 only
## (COMPAT_SIDEKIQ): every Sidekiq version runs in `make test`, every server here.
SERVERS_DIR ?= ../shared/servers
COMPAT_SERVERS ?= redis-7.2.6 redis-8.0.6 valkey-8.0.1 valkey-9.1.2
COMPAT_SIDEKIQ ?= 8
# Every client directory is a suite, but clients/conformance (the table the clients' suites read).
COMPAT_SUITES ?= $(strip test-rust $(patsubst clients/%/,test-%,$(sort $(filter-out clients/conformance/,$(wildcard clients/*/)))))

.PHONY: test-compat test-compat-server test-suites test-rust
# Per server, the suites skip only what does not depend on the server, and which `make test`
# ran once already: Rust's unit and property tests and doctests (only the integration tests,
# which start servers, run: `--test '*'`), the gem's `gem build` test and the Node package's
# `npm pack` test, and the Python extras' test (fresh venvs installed from PyPI, each running
# the README's example). The Node build and the Python venv are made once, not per server.
COMPAT_RUST_TESTS ?= --test '*'
COMPAT_RUBY_TESTS ?= $(filter-out test/gem_build_test.rb,$(patsubst clients/ruby/%,%,$(wildcard clients/ruby/test/*_test.rb)))
COMPAT_NODE_SKIP ?= pack
COMPAT_PYTEST_ARGS ?= --ignore=tests/test_extras.py
## test-compat: every suite (COMPAT_SUITES) on each server of COMPAT_SERVERS, the servers dealt
## into COMPAT_LANES lanes side by side (.ci/compat; 1: one by one, output live); a server not
## built yet is built (scripts/locked-build waits for a build already under way, as .ci/run's)
COMPAT_LANES ?= 2
test-compat: deps $(MODULE) python-venv node-deps $(NODE_DIST)
	@[ -x $(SERVERS_DIR)/build.sh ] || { echo "no $(SERVERS_DIR)/build.sh: set SERVERS_DIR" >&2; exit 1; }
	@COMPAT_LANES=$(COMPAT_LANES) .ci/compat $(COMPAT_SERVERS)

## test-compat-server: every suite of COMPAT_SUITES on one server, COMPAT_SERVER (a name that
## ../shared/servers/build.sh knows), each suite's log named after it (target/ci/SUITE@NAME.log)
test-compat-server: deps $(MODULE) python-venv node-deps $(NODE_DIST)
	@server=$$(SERVERS_DIR=$(abspath $(SERVERS_DIR)) nice -n 10 scripts/locked-build $(COMPAT_SERVER)); \
	cli=$$(ls "$$(dirname "$$server")"/redis-cli "$$(dirname "$$server")"/valkey-cli 2>/dev/null | head -1); \
	echo "== $(COMPAT_SERVER): $(COMPAT_SUITES) with $$server and $${cli:-redis-cli}"; \
	REDIS_SERVER=$$server REDIS_CLI=$$cli REDIS_UNIQUE_MODULE=$(CURDIR)/$(MODULE) SUITE_TAG=$(COMPAT_SERVER) \
	    $(MAKE) --no-print-directory -k test-suites SIDEKIQ_VERSIONS="$(COMPAT_SIDEKIQ)" \
	    RUST_TESTS="$(COMPAT_RUST_TESTS)" RUBY_TESTS="$(COMPAT_RUBY_TESTS)" TEST_SKIP="$(COMPAT_NODE_SKIP)" \
	    PYTEST_ARGS="$(COMPAT_PYTEST_ARGS)" \
	    || { echo "== FAILED on $(COMPAT_SERVER)" >&2; exit 1; }

## test-suites: every suite of COMPAT_SUITES against REDIS_SERVER (default: redis-server on the PATH)
test-suites: $(COMPAT_SUITES)

## test-rust: unit tests, integration tests and the redis-cli suite (no lints), each test
## binary's tests started in TEST_SEED's order (.ci/shuffled-test; they run on threads);
## RUST_TESTS narrows it (test-compat: `--test '*'`, the integration tests, which start servers)
RUST_TESTS ?=
HOST_TRIPLE := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
test-rust:
	$(SUITE) rust -- cargo test $(RUST_TESTS) \
		--config 'target.$(HOST_TRIPLE).runner = "$(CURDIR)/.ci/shuffled-test"'

## ---- Node.js client (clients/node): dependencies from the committed lockfile (npm ci)
.PHONY: test-node bench-node node-deps
clients/node/node_modules/.installed: clients/node/package-lock.json
	cd clients/node && npm ci --no-audit --no-fund --loglevel=error
	touch $@

node-deps: clients/node/node_modules/.installed

## test-node: the Node client's tests (real redis-server, real BullMQ workers in child processes),
## then the BullMQ workers on a server started WITHOUT the module, so every call goes through
## the Functions library (NODE_FUNCTIONS_TESTS; the library's own tests run in the first)
NODE_FUNCTIONS_TESTS ?= test/bullmq.test.mjs test/bullmq-limits.test.mjs test/bullmq-turns.test.mjs
test-node: deps node-deps $(NODE_DIST) $(MODULE)
	cd clients/node && $(SUITE) node -- npm test --silent
	cd clients/node && REDIS_UNIQUE_TEST_BACKEND=functions $(SUITE) node-functions -- \
		npm test --silent -- $(NODE_FUNCTIONS_TESTS)

# The package's build (tsc, ESM and CommonJS), redone only when its sources change.
$(NODE_DIST): $(wildcard clients/node/src/*.ts clients/node/src/**/*.ts) clients/node/package.json \
		clients/node/tsconfig.json clients/node/tsconfig.cjs.json clients/node/scripts/cjs-package.mjs \
		clients/node/node_modules/.installed
	cd clients/node && npm run --silent build
	touch $@

## bench-node: Mutex pairs/s against redis-semaphore, BullMQ jobs/s with and without GroupLimit
bench-node: deps node-deps build-pgo
	cd clients/node && npm run --silent build && REDIS_UNIQUE_MODULE=$(CURDIR)/$(PGO_MODULE) npm run --silent bench

bench: bench-node

## ---- Release artifacts: one version (Cargo.toml's; scripts/version.sh keeps the clients'
## equal) for the module, the gem, the wheel and sdist and the npm package (docs/install.md)
.PHONY: dist test-dist
## dist: every artifact into dist/ with SHA256SUMS: the x86_64 module for glibc 2.17 or later
## (cargo-zigbuild and ziglang, pinned, in a venv made when missing), the .gem, the wheel,
## the sdist and the npm tarball
dist: deps
	./scripts/dist.sh

## test-dist: the artifacts as a user gets them: checksums, glibc symbol versions, the
## dist .so on Redis 7.0 and every COMPAT_SERVERS server (a subset of the Rust suite that
## sends every command), and each client installed from its artifact into a clean place
## running one real Sidekiq, RQ and BullMQ job
test-dist: dist
	SERVERS_DIR=$(SERVERS_DIR) COMPAT_SERVERS="$(COMPAT_SERVERS)" ./scripts/test-dist.sh

## ---- Flakes: the same suites again and again, each run in another order
## test-repeat: REPEAT runs (default 3) of REPEAT_SUITES, each with a fresh TEST_SEED; every
## run goes on to the end, and the failures of all runs (suite, tests, seed, server) are
## listed at the end (target/ci/failures). SIDEKIQ_VERSIONS picks the gem's Sidekiqs.
REPEAT ?= 3
REPEAT_SUITES ?= test-rust test-python test-node test-ruby
.PHONY: test-repeat
test-repeat: deps
	@rm -f target/ci/failures; failed=0; for i in $$(seq $(REPEAT)); do \
	    seed=$$(od -An -N2 -tu2 /dev/urandom | awk '{ print $$1 % 65535 }'); \
	    echo "== test-repeat $$i/$(REPEAT): TEST_SEED=$$seed"; \
	    $(MAKE) --no-print-directory -k $(REPEAT_SUITES) TEST_SEED=$$seed || failed=$$((failed + 1)); \
	done; \
	echo "== test-repeat: $$failed of $(REPEAT) runs failed"; \
	[ $$failed = 0 ] || { cat target/ci/failures; exit 1; }
