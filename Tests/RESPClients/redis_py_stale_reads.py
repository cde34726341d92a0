#!/usr/bin/env python3
"""Checks that a write acknowledged to one connection is never followed by a stale read from
redis-py's client cache on another: the invalidation reaches the cached client's socket
before the writer gets its reply, as with Redis.

Each round, on a key of its own: the cached client reads it twice (the second from its
memory), another connection changes it and gets its reply, and the cached client reads it at
once.

With --tls-ca, the RESP clients connect over TLS (--port is then the RESP TLS listener's),
checking the server's certificate against that CA.

Usage: redis_py_stale_reads.py --port PORT --line-port PORT [--rounds N] [--writer resp|line] [--tls-ca FILE]
Prints `stale N of ROUNDS`; exits 0 when no read was stale, 1 otherwise.
"""

import argparse
import socket
import sys

import redis
from redis.cache import CacheConfig


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="the RESP front's port")
    parser.add_argument("--line-port", type=int, required=True, help="the same node's line-protocol port")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--writer", choices=["resp", "line"], default="resp")
    parser.add_argument("--tls-ca", help="connect the RESP clients over TLS, trusting this CA")
    options = parser.parse_args()
    tls = {"ssl": True, "ssl_ca_certs": options.tls_ca} if options.tls_ca else {}
    cached = redis.Redis(port=options.port, protocol=3, cache_config=CacheConfig(), socket_timeout=5, **tls)
    writer = redis.Redis(port=options.port, socket_timeout=5, **tls)
    line = socket.create_connection(("127.0.0.1", options.line_port), timeout=5)
    replies = line.makefile("rb")
    stale = 0
    for round in range(options.rounds):
        key = "stale%d" % round
        before, after = "old%d" % round, "new%d" % round
        writer.hset(key, mapping={"name": before, "portraitUri": "u"})
        cached.hget(key, "name")
        if cached.hget(key, "name") != before.encode():
            print("FAIL round %d: the cached client never read %r" % (round, before))
            return 1
        if options.writer == "resp":
            writer.hset(key, "name", after)
        else:
            line.sendall(("UPDATE %s name %s\n" % (key, after)).encode())
            reply = replies.readline()
            if reply != b"UPDATED\n":
                print("FAIL round %d: UPDATE answered %r" % (round, reply))
                return 1
        if cached.hget(key, "name") != after.encode():
            stale += 1
    print("stale %d of %d" % (stale, options.rounds))
    return 0 if stale == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
