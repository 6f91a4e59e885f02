"""Two builds of the module side by side on the floor's pipelined comparison:
LOCK against floor.lock and UNLOCK against floor.unlock (bench/floor.py's
commands, 50 clients, pipeline 16). Build A and build B run alternately, the
order reversed every other pair (a fresh server each run, with the floor
loaded beside the module), and the medians of their ratios to the floor are
printed: a change of a few percent is measured against the code before it
in the same minutes, not against a figure taken earlier.

    git stash; make build; cp target/release/libredis_unique.so /tmp/a.so
    git stash pop; make build; cp target/release/libredis_unique.so /tmp/b.so
    FLOOR_SERVERS=redis-8.0.6 python3 bench/floor_ab.py /tmp/a.so /tmp/b.so [pairs]

FLOOR_SERVERS: the server (one name, as for bench/floor.py; default
redis-7.0.15, the one on the PATH); BENCH_ROUNDS: rounds per run (default 3
here). Never copy over a .so while a run has it loaded: copy each build to
its own file first."""

import os
import statistics
import sys

os.environ.setdefault("BENCH_ROUNDS", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import floor  # noqa: E402

PAIRS = (("UNIQUE.LOCK", "floor.lock", floor.LOCKS),
         ("UNIQUE.UNLOCK", "floor.unlock", floor.UNLOCKS))


def run(module, floor_so):
    """One server with `module` and the floor: per command, its requests/s
    over the floor's in the same rounds."""
    bench.MODULE = module
    server = floor.Server(modules=[floor_so])
    try:
        out = {}
        for mine, theirs, contenders in PAIRS:
            res = bench.compare(server, {k: contenders[k] for k in (mine, theirs)}, 16)
            out[mine] = res[mine]["rps"] / res[theirs]["rps"]
        return out
    finally:
        server.stop()


def main():
    a, b, pairs = bench.ab_builds(__doc__)
    name = os.environ.get("FLOOR_SERVERS", "redis-7.0.15").split()[0]
    binary, include = floor.binary_and_header(name)
    bench.SERVER_BINARY = binary
    floor_so = floor.build_floor(name, include)
    bench.ROUNDS = int(os.environ["BENCH_ROUNDS"])
    ratios = {a: {}, b: {}}
    for module, result in bench.alternate(a, b, pairs, lambda m: run(m, floor_so)):
        for command, ratio in result.items():
            ratios[module].setdefault(command, []).append(ratio)
            print("%s  %-14s %.3fx the floor" % (os.path.basename(module), command, ratio),
                  flush=True)
    print("\n%s, medians over %d runs each (requests/s over the floor's, pipeline 16):" % (
        name, pairs))
    for command, _, _ in PAIRS:
        ma = statistics.median(ratios[a][command])
        mb = statistics.median(ratios[b][command])
        print("  %-14s A %.3fx  B %.3fx  B/A %.3f" % (command, ma, mb, mb / ma))


if __name__ == "__main__":
    main()
