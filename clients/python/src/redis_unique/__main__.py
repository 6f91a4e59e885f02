"""``python -m redis_unique functions load URL``: loads the Functions library (the
backend where the module cannot be loaded) into the server at URL, on every primary
with ``--cluster``; ``functions version URL`` prints the loaded library's version,
``functions source`` prints the library itself (for ``redis-cli -x FUNCTION LOAD REPLACE``)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import _functions


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m redis_unique")
    sub = parser.add_subparsers(dest="group", required=True)
    functions = sub.add_parser("functions", help="the Redis Functions library, for servers without the module")
    action = functions.add_subparsers(dest="action", required=True)
    for name, text in (("load", "FUNCTION LOAD REPLACE the library"), ("version", "the loaded library's version")):
        p = action.add_parser(name, help=text)
        p.add_argument("url", help="redis://[user:password@]host:port[/db] (rediss:// for TLS)")
        p.add_argument("--cluster", action="store_true", help="a Redis Cluster: every primary")
    action.add_parser("source", help="print the library")
    args = parser.parse_args(argv)
    if args.action == "source":
        sys.stdout.write(_functions.library_source())
        return 0
    import redis

    conn = redis.RedisCluster.from_url(args.url) if args.cluster else redis.Redis.from_url(args.url)
    if args.action == "load":
        _functions.load(conn)
        print("loaded redis_unique library version %d" % _functions.library_version())
        return 0
    if args.cluster:
        for node in conn.get_primaries():
            print("%s:%s %s" % (node.host, node.port,
                                conn.execute_command("FCALL_RO", "unique_version", 0, target_nodes=node)))
    else:
        print(conn.execute_command("FCALL_RO", "unique_version", 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
