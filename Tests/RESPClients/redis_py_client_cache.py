#!/usr/bin/env python3
"""Checks profiled's client-side caching with redis-py's own client cache, unmodified, the
way a Python chat server would use it: `Redis(protocol=3, cache_config=CacheConfig())`.

- A read after the first is answered from the client's memory: the server's lookup count
  does not move.
- A change made on this node is seen by the cached client on its first read after the write
  was answered: a write through another RESP connection, through the line protocol
  (--line-port), by the cached client itself, DEL and FLUSHALL. With --other-line-port, a
  write through another node, and with --sql-conninfo and --psql, plain SQL on the shared
  PostgreSQL: across nodes the change may take up to the lease (--lease-seconds) to be seen.

Usage: redis_py_client_cache.py --port PORT --line-port PORT [--key-prefix P]
                                [--other-line-port PORT] [--psql PATH --sql-conninfo C]
                                [--lease-seconds S] [--tls-ca CA]
Exits 0 when every check passed; 1 when one failed, printed as `FAIL <check>: <what>`.
"""

import argparse
import socket
import subprocess
import sys
import time

import redis
from redis.cache import CacheConfig


class Failed(Exception):
    pass


def expect(actual, expected, what):
    if actual != expected:
        raise Failed("%s: got %r, expected %r" % (what, actual, expected))


def line_write(port, request):
    """One line-protocol request on a connection of its own; returns the reply line."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request.encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.decode().strip()


def seen_within(seconds, read, expected):
    """Polls `read` until it returns `expected`; the seconds it took, or None."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if read() == expected:
            return time.monotonic() - start
        time.sleep(0.002)
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="the RESP front's port")
    parser.add_argument("--line-port", type=int, required=True, help="the same node's line-protocol port")
    parser.add_argument("--key-prefix", default="")
    parser.add_argument("--other-line-port", type=int, help="another node's line-protocol port")
    parser.add_argument("--psql", help="psql, for --sql-conninfo")
    parser.add_argument("--sql-conninfo", help="the shared PostgreSQL, changed by plain SQL")
    parser.add_argument("--lease-seconds", type=float, default=1.0)
    parser.add_argument("--tls-ca", help="reach the RESP front over TLS, checking its certificate against this CA")
    options = parser.parse_args()
    tls = {"ssl": True, "ssl_ca_certs": options.tls_ca} if options.tls_ca else {}
    cached = redis.Redis(port=options.port, protocol=3, cache_config=CacheConfig(), socket_timeout=5, **tls)
    plain = redis.Redis(port=options.port, socket_timeout=5, **tls)
    key = lambda user_id: options.key_prefix + user_id
    read = lambda user_id: cached.hgetall(key(user_id))
    checks = []

    def check(name):
        def wrap(body):
            checks.append((name, body))
            return body
        return wrap

    @check("reads after the first come from the client's memory")
    def _():
        plain.hset(key("a"), mapping={"name": "Ana", "portraitUri": "https://cdn.example/a.png"})
        expect(read("a"), {b"name": b"Ana", b"portraitUri": b"https://cdn.example/a.png"}, "the first read")
        lookups = plain.info("stats")["keyspace_hits"]
        for _ in range(50):
            expect(read("a")[b"name"], b"Ana", "a cached read")
        expect(plain.info("stats")["keyspace_hits"], lookups, "the server's lookups across 50 cached reads")
        expect(cached.get_cache().size >= 1, True, "the client cache holds the profile")

    @check("a write through another RESP connection")
    def _():
        plain.hset(key("a"), "name", "Ana Li")
        expect(read("a").get(b"name"), b"Ana Li", "the read right after the write was answered")

    @check("a write through the line protocol")
    def _():
        expect(line_write(options.line_port, "SET a Ana-line https://cdn.example/a2.png"), "STORED", "the line write")
        expect(read("a").get(b"name"), b"Ana-line", "the read right after the write was answered")

    @check("the cached client's own write, read back at once")
    def _():
        read("a")
        cached.hset(key("a"), "name", "Ana-own")
        expect(read("a").get(b"name"), b"Ana-own", "the read right after the write")

    @check("DEL and FLUSHALL")
    def _():
        plain.hset(key("b"), "name", "Bo")
        expect(read("b").get(b"name"), b"Bo", "b before")
        plain.delete(key("b"))
        expect(read("b"), {}, "the read right after DEL was answered")
        expect(read("a").get(b"name"), b"Ana-own", "a cached again")
        plain.flushall()
        expect(read("a"), {}, "the read right after FLUSHALL was answered")

    if options.other_line_port:
        @check("a write through another node")
        def _():
            plain.hset(key("c"), "name", "Cy")
            expect(read("c").get(b"name"), b"Cy", "c before")
            expect(line_write(options.other_line_port, "SET c Cy-other u"), "STORED", "the other node's write")
            took = seen_within(options.lease_seconds + 1, lambda: read("c").get(b"name"), b"Cy-other")
            expect(took is not None and took <= options.lease_seconds, True,
                   "seen after %s s; the lease is %g s" % (took, options.lease_seconds))

    if options.sql_conninfo:
        @check("plain SQL on the shared PostgreSQL")
        def _():
            expect(read("c").get(b"name"), b"Cy-other", "c before")
            subprocess.run([options.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", options.sql_conninfo,
                            "-c", "UPDATE profiles SET name = 'Cy-sql' WHERE user_id = 'c'"], check=True)
            took = seen_within(options.lease_seconds + 1, lambda: read("c").get(b"name"), b"Cy-sql")
            expect(took is not None and took <= options.lease_seconds, True,
                   "seen after %s s; the lease is %g s" % (took, options.lease_seconds))

    failures = 0
    for name, body in checks:
        try:
            body()
        except (Failed, redis.RedisError, OSError, subprocess.CalledProcessError) as error:
            print("FAIL %s: %s" % (name, error))
            failures += 1
    print("redis-py client cache: %d checks, %d failed" % (len(checks), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
