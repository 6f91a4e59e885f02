#!/usr/bin/env python3
"""Draws the benchmark's results into docs/img/: `make bench-plots`.

Reads what the benchmarks wrote and draws one PNG per comparison, each captioned with
the machine, the server and the date of the run it shows:

- throughput.png   bench/results/servers.json and floor.json: LOCK/UNLOCK against
                   SET NX PX and DEL, the Lua design and the floor, per server;
- many_holders.png bench/results/latest.json (or many.json, when present): requests
                   per second against holders on one key, 1 to 100,000, beside the
                   sorted set (and Redis's own hash, when the file has it);
- contended.png    clients/node/bench/results-contended.json: the contended wait p50
                   and p99 and critical sections a second against redis-semaphore;
- rate.png         bench/results/cell.json: RATE against redis-cell's CL.THROTTLE.

A chart whose results file is missing is skipped with the reason. Runs in the bench's
venv (bench/.venv, matplotlib), which `make bench-plots` creates.
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import transforms  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "img")
OURS, THEIRS, THIRD, FOURTH = "#1f6fb4", "#e07b39", "#7a7a7a", "#4d9a4d"


def load(rel):
    path = os.path.join(ROOT, rel)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def machine_text(m):
    if not m:
        return "machine not recorded"
    return "%s, %s CPUs" % (m.get("cpu") or "unknown CPU", m.get("cpus", "?"))


def server_text(binary):
    """A results file names the server's binary: the server on the PATH, or a built one."""
    name = os.path.basename(os.path.dirname(os.path.dirname(binary))) if "/" in binary else ""
    return name.replace("redis-", "Redis ").replace("valkey-", "Valkey ") or \
        "%s on the PATH (its version not recorded)" % binary


def caption(fig, lines):
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7.5, color="#444444",
             ha="left", va="bottom")


def save(fig, name):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("wrote", os.path.relpath(path, ROOT))


def bar_labels(ax, bars, fmt="%.2fx"):
    for b in bars:
        ax.annotate(fmt % b.get_height(), (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=7, xytext=(0, 1),
                    textcoords="offset points")


def throughput():
    servers = load("bench/results/servers.json")
    floor = load("bench/results/floor.json")
    if not servers:
        print("skipped throughput.png: no bench/results/servers.json (BENCH_SERVERS=all make bench)")
        return
    names = list(servers["servers"])
    series = [
        ("LOCK / SET NX PX", "lock_vs_set_p16", OURS),
        ("UNLOCK / DEL", "unlock_vs_del_p16", "#6aa5d8"),
        ("LOCK with META / Lua lock", "lock_meta_vs_lua_p16", THEIRS),
        ("RATE / Lua GCRA", "rate_vs_gcra_p16", FOURTH),
    ]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2),
                             gridspec_kw={"width_ratios": [5, 3]})
    ax = axes[0]
    width = 0.8 / len(series)
    for i, (label, key, color) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(names))]
        ys = [servers["servers"][n]["summary"][key] for n in names]
        bar_labels(ax, ax.bar(xs, ys, width, label=label, color=color))
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylabel("ratio of requests/s (pipeline 16, 50 clients)")
    ax.set_title("Against plain commands and the Lua design (above 1: faster)", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    ax.set_ylim(0, max(servers["servers"][n]["summary"][k] for n in names for _, k, _ in series) * 1.3)

    ax = axes[1]
    if floor:
        fnames = list(floor["servers"])
        ops = [("LOCK", "UNIQUE.LOCK", "floor.lock", "SET NX PX"),
               ("UNLOCK", "UNIQUE.UNLOCK", "floor.unlock", "DEL")]
        width = 0.13
        k = 0
        ticks = []
        for j, n in enumerate(fnames):
            ins = floor["servers"][n].get("instructions", {})
            for o, (label, ours, fl, plain) in enumerate(ops):
                x = j * 2.2 + o
                ticks.append((x, label))
                for i, (key, color, lab) in enumerate(((ours, OURS, "redis-unique"),
                                                       (fl, THIRD, "the floor"),
                                                       (plain, THEIRS, "SET NX PX / DEL"))):
                    if key in ins:
                        ax.bar(x + (i - 1) * width * 2, ins[key], width * 2, color=color,
                               label=lab if k == 0 else None)
                k += 1
        ax.set_xticks([t[0] for t in ticks], [t[1] for t in ticks], fontsize=7)
        below = transforms.blended_transform_factory(ax.transData, ax.transAxes)
        for j, n in enumerate(fnames):
            ax.text(j * 2.2 + 0.5, -0.1, n.replace("redis-", "Redis ").replace("valkey-", "Valkey "),
                    transform=below, ha="center", va="top", fontsize=8)
        ax.set_ylabel("instructions per request (callgrind)")
        ax.set_title("Against the floor: the least a module command can do", fontsize=10)
        ax.legend(fontsize=8, loc="upper center", ncol=3)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
    else:
        ax.text(0.5, 0.5, "no bench/results/floor.json\n(make bench-floor)", ha="center",
                va="center", transform=ax.transAxes)
        ax.set_axis_off()
    lines = ["Left: %s, run of %s (BENCH_SERVERS=all make bench, bench/results/servers.json)."
             % (machine_text(servers.get("machine")), servers["date"])]
    if floor:
        lines.append("Right: %s, run of %s (make bench-floor, bench/results/floor.json), "
                     "20,000 requests at pipeline 16 under callgrind." %
                     (machine_text(floor.get("machine")), floor["date"]))
    caption(fig, lines)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(fig, "throughput.png")


def many_holders():
    many = load("bench/results/many.json")
    if many and many.get("servers"):
        server, rows = next(iter(many["servers"].items()))
        rows = rows.get("many_holders", rows) if isinstance(rows, dict) else rows
        source, date, m = "bench/results/many.json (make bench-many)", many["date"], many.get("machine")
    else:
        latest = load("bench/results/latest.json")
        if not latest or not latest.get("many_holders"):
            print("skipped many_holders.png: no many_holders in bench/results/latest.json (make bench)")
            return
        rows = latest["many_holders"]
        m = latest.get("machine")
        server = (m or {}).get("redis", "the server on the PATH")
        source, date = "bench/results/latest.json (make bench)", latest["date"]
    commands = [c for c in ("renewal", "grant+release", "denial") if any(r["command"] == c for r in rows)]
    has_hash = any("hash" in r for r in rows)
    top = max(max(r["module"]["rps"], r["sorted_set"]["rps"], r.get("hash", {}).get("rps", 0))
              for r in rows) / 1000 * 1.1
    fig, axes = plt.subplots(1, len(commands), figsize=(12, 4.6), sharey=True)
    for ax, c in zip(axes, commands):
        rs = sorted((r for r in rows if r["command"] == c), key=lambda r: r["holders"])
        xs = [r["holders"] for r in rs]
        ax.plot(xs, [r["module"]["rps"] / 1000 for r in rs], "o-", color=OURS, label="redis-unique")
        ax.plot(xs, [r["sorted_set"]["rps"] / 1000 for r in rs], "s-", color=THEIRS,
                label="sorted set + Lua (redis-semaphore's)")
        if c == "renewal" and has_hash:
            hs = [r for r in rs if "hash" in r]
            ax.plot([r["holders"] for r in hs], [r["hash"]["rps"] / 1000 for r in hs], "^--",
                    color=THIRD, label="HSET of one of N fields")
        ax.set_xscale("log")
        ax.set_xticks(xs, ["{:,}".format(x) for x in xs], fontsize=8)
        ax.set_xlabel("holders on the key")
        ax.set_title(c, fontsize=10)
        ax.set_ylim(0, top)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("thousand requests/s (pipeline 16)")
    axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.02, 0.5))
    lines = ["%s, %s, run of %s, %s." % (server, machine_text(m), date, source)]
    if not has_hash:
        lines.append("Redis's own hash is not drawn: this results file has no hash figures "
                     "(make bench-many writes them to bench/results/many.json).")
    caption(fig, lines)
    fig.suptitle("Cost against holders on one key", fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save(fig, "many_holders.png")


def contended():
    data = load("clients/node/bench/results-contended.json")
    if not data:
        print("skipped contended.png: no clients/node/bench/results-contended.json (make bench-node)")
        return
    cases = []
    for r in data["contended"]:
        if r["contended"] not in cases:
            cases.append(r["contended"])
    get = {(r["contended"], r["library"]): r for r in data["contended"]}
    libs = [("redis-unique", OURS), ("redis-semaphore", THEIRS)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    ax = axes[0]
    width = 0.2
    for i, (lib, color) in enumerate(libs):
        for q, (key, hatch) in enumerate((("p50 acquire ms", None), ("p99 acquire ms", "//"))):
            xs = [j + (i * 2 + q - 1.5) * width for j in range(len(cases))]
            ys = [max(get[(c, lib)][key], 0.05) for c in cases]
            ax.bar(xs, ys, width, color=color, hatch=hatch, edgecolor="white",
                   label="%s, %s" % (lib, key.split()[0]))
    ax.set_yscale("log")
    short = [c.replace(", ", "\n") for c in cases]
    ax.set_xticks(range(len(cases)), short, fontsize=8)
    ax.set_ylabel("time to acquire, ms (log)")
    ax.set_title("Contended wait: p50 and p99 (lower is better)", fontsize=10)
    ax.legend(fontsize=7.5, loc="upper left")
    ax = axes[1]
    width = 0.38
    for i, (lib, color) in enumerate(libs):
        xs = [j + (i - 0.5) * width for j in range(len(cases))]
        bars = ax.bar(xs, [get[(c, lib)]["sections/s"] for c in cases], width, color=color, label=lib)
        bar_labels(ax, bars, "%d")
    ax.set_xticks(range(len(cases)), short, fontsize=8)
    ax.set_ylabel("critical sections per second")
    ax.set_title("Throughput under contention (higher is better)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    caption(fig, ["Node %s clients (ioredis) on one key, 1 ms hold, median of %s rounds of %s s; "
                  "server: %s; %s;"
                  % (data.get("node", ""), data.get("rounds", "?"), data.get("seconds", "?"),
                     data.get("server", "redis-server on the PATH (its version not recorded)"),
                     machine_text(data.get("machine"))),
                  "run of %s (make bench-node, clients/node/bench/results-contended.json). "
                  "A p50 under 0.05 ms is drawn at 0.05 ms." % data["date"]])
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save(fig, "contended.png")


def rate():
    cell = load("bench/results/cell.json")
    if not cell:
        print("skipped rate.png: no bench/results/cell.json (make bench-cell)")
        return
    t, ins = cell.get("throughput", {}), cell.get("instructions", {})
    cases = [("fresh keys", "UNIQUE.LOCK RATE", "CL.THROTTLE"),
             ("one hot key, denied", "UNIQUE.LOCK RATE hot", "CL.THROTTLE hot")]
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.4))
    panels = [("requests/s, pipeline 16", lambda k: t.get(k + " p16", {}).get("rps"), "%d"),
              ("requests/s, unpipelined", lambda k: t.get(k + " p1", {}).get("rps"), "%d"),
              ("instructions per request (lower is better)", lambda k: ins.get(k), "%d")]
    width = 0.38
    for ax, (title, value, fmt) in zip(axes, panels):
        for i, (lib, idx, color) in enumerate((("UNIQUE.LOCK ... RATE", 1, OURS),
                                               ("redis-cell CL.THROTTLE", 2, THEIRS))):
            xs = [j + (i - 0.5) * width for j in range(len(cases))]
            ys = [value(c[idx]) or 0 for c in cases]
            bar_labels(ax, ax.bar(xs, ys, width, color=color, label=lib), fmt)
        ax.set_xticks(range(len(cases)), [c[0] for c in cases], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
    axes[0].legend(fontsize=8, loc="upper left")
    caption(fig, ["%s, %s, %s clients, median of %s rounds; run of %s (make bench-cell, "
                  "bench/results/cell.json); redis-cell %s."
                  % (server_text(cell.get("server", "redis-server")),
                     machine_text(cell.get("machine")), cell.get("clients"), cell.get("rounds"),
                     cell["date"], cell.get("redis_cell"))])
    fig.suptitle("UNIQUE.LOCK ... RATE against redis-cell's CL.THROTTLE (fresh keys: RATE 100 PER 1000; "
                 "one hot key: RATE 1 PER 3600000)", fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save(fig, "rate.png")


def main():
    for draw in (throughput, many_holders, contended, rate):
        draw()
    return 0


if __name__ == "__main__":
    sys.exit(main())
