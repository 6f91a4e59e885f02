"""Two builds of the module side by side on `make bench-many`'s comparison:
one key of N holders against the same command on a one-holder key, in the
same rounds. Build A and build B run alternately, the order reversed every
other pair (a fresh server each run), and the medians of their ratios are
printed: on a shared machine whose speed moves by 15 % between minutes, a
change is measured against the code before it in the same minutes, not
against a figure taken earlier.

    git stash; make build; cp target/release/libredis_unique.so /tmp/a.so
    git stash pop; make build; cp target/release/libredis_unique.so /tmp/b.so
    MANY_COMMANDS=renewal python3 bench/many_ab.py /tmp/a.so /tmp/b.so [pairs]

MANY_SIZES: the N (default 100000); MANY_COMMANDS as for `make bench-many`;
BENCH_ROUNDS: rounds per run (default 3 here); AB_SERVER: a redis-server
binary (default: the one on the PATH). Never copy over a .so while a run has
it loaded: copy each build to its own file first."""

import os
import statistics
import sys

os.environ.setdefault("MANY_SIZES", "100000")
os.environ.setdefault("BENCH_ROUNDS", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def run(module):
    """One server with `module`: per command, (N holders, one holder) as
    many_holders measures them."""
    bench.MODULE = module
    server = bench.Server()
    try:
        many = bench.many_holders(server, native=False)
    finally:
        server.stop()
    out = {}
    for n, ops in many.items():
        for op, res in ops.items():
            figures = next(iter(res.values()))  # the module's contender comes first
            # At N = 1 the module's own figures are the one-holder key's.
            out[(n, op)] = (figures, res.get(bench.ONE_HOLDER, figures))
    return out


def main():
    a, b, pairs = bench.ab_builds(__doc__)
    if os.environ.get("AB_SERVER"):
        bench.SERVER_BINARY = os.environ["AB_SERVER"]
    ratios = {a: {}, b: {}}
    for module, result in bench.alternate(a, b, pairs, run):
        for key, (many, one) in result.items():
            by_cpu = one["cpu_us"] / many["cpu_us"]
            ratios[module].setdefault(key, []).append(
                (many["rps"] / one["rps"], many["rps"], by_cpu, many["cpu_us"]))
            print("%s  %s holders %-14s %8.0f req/s, %.3fx one holder; %.2f µs of server CPU, "
                  "%.3fx" % (os.path.basename(module), format(key[0], ","), key[1], many["rps"],
                             many["rps"] / one["rps"], many["cpu_us"], by_cpu), flush=True)
    print("\nmedians over %d runs each (against a one-holder key in the same rounds; by req/s, "
          "then by the server's CPU a request, the steadier on a shared machine):" % pairs)
    for key in sorted(ratios[a]):
        (ra, qa, ca, ua), (rb, qb, cb, ub) = (
            [statistics.median(x) for x in zip(*ratios[m][key])] for m in (a, b))
        print("  %s holders %-14s A %.3fx (%.0f req/s)  B %.3fx (%.0f req/s)  B/A %.3f" % (
            format(key[0], ","), key[1], ra, qa, rb, qb, rb / ra))
        print("  %s holders %-14s A %.3fx (%.2f µs)  B %.3fx (%.2f µs)  B/A %.3f" % (
            format(key[0], ","), key[1], ca, ua, cb, ub, cb / ca))


if __name__ == "__main__":
    main()
