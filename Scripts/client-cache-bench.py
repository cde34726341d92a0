#!/usr/bin/env python3
"""What redis-py's client-side cache buys a chat server's renderer reading profiles from profiled.

Scripts/bench --client-cache runs it; by hand, against a profiled with --resp-port and no
--resp-key-prefix (and, optionally, a throw-away redis-server):

    client-cache-bench.py preload --port P [--keys N]
    client-cache-bench.py measure --port P [--redis-port R] [--keys N] [--seconds S] [--rounds N]

preload writes N profiles as hashes, keys u:0 to u:<N-1> (the userIds themselves), with the
fields name and portraitUri: pipelined HSETs, 1,000 a round trip; then reads each once, as
profilebench --warm does, because profiled caches what is read, not what is written.

measure, against profiled:

1. Lookups, twice in this one process: first one redis-py client with protocol=3 and no
   client cache, then one with cache_config=CacheConfig(max_size=200000), which holds every
   profile. Each client has its own ConnectionPool; this single-threaded loop uses one
   connection of it. The ids are zipf-distributed (s = 1.0, rank r drawn with weight 1/r,
   over all N ids, one fixed draw of 2^20 ids cycled, the same for every run). Every 100th
   operation is a write instead: HSET of the drawn id's name through a second, plain client
   (no cache) in the same loop, so writes are exactly 1% of the traffic at whatever rate the
   reads reach, and each write invalidates the cached client's copy the way another
   process's write would. Only the other 99 operations, the HGETALLs, count as lookups. Each
   run is 1 s unmeasured, then --seconds measured. A write waits for its reply, so the
   lookup rate includes the writes' round trips. Before its run, unmeasured, the cached
   client reads each id drawn once (about 82,000 of 100,000): the cache a renderer running
   for long holds, not a cold one; then the cost of a hit alone is timed, the hottest id read
   over and over for 1 s, which bounds the ratio whatever the hit share. The server's
   total_commands_processed (INFO) before and after the cached run's measured part says how
   many of its lookups reached the server.
   Afterwards the cached client reads the 1,000 hottest ids, and the plain client too: any
   difference is a stale value the cache kept after the write's reply.
2. Write to seen: --rounds rounds of: the cached client reads a zipf-drawn id K twice (the
   second from its cache), the plain client HSETs K's name to a new value and notes the
   time its reply arrived, then the cached client reads K in a tight loop until it sees the
   new value (1 s at most, else the round counts as never seen). The time from the reply to
   the read that saw it: p50 and p99. profiled queues the invalidation for the reader when
   it commits, before the writer's reply, but the two travel on different connections: the
   first read after the reply usually misses the cache, and may still hit it.

Against redis-server (--redis-port), the same uncached lookups; then it tries a cached client
there, which redis-py refuses below Redis 7.4 (Debian's is 7.0), and prints why.

Bounded: every socket operation times out after 10 s, every loop stops at its time or count.
Progress goes to stderr; a table and one summary line to stdout.
"""
import argparse
import itertools
import random
import sys
import time

import redis
from redis.cache import CacheConfig

ZIPF_S = 1.0
DRAWS = 1 << 20          # zipf-drawn ids, cycled
WRITE_EVERY = 100        # one operation in 100 is a write
BATCH = 1000             # HSETs or HGETALLs per pipeline round trip in preload
WARM_SECONDS = 1.0       # unmeasured, before each measured run
CACHE_SIZE = 200_000     # the client cache's max_size, above --keys' default
HOT_CHECKED = 1000       # ids compared between the cached and the plain client after a run
HIT_SECONDS = 1.0        # reading one cached id over and over, to time a hit
POLL_LIMIT = 1.0         # seconds a staleness round waits to see its write
TIMEOUT = 10             # seconds, any one socket operation


def log(message):
    print(f"client-cache-bench: {message}", file=sys.stderr, flush=True)


def key(n):
    return f"u:{n}"


def client(port, cached=False):
    options = dict(host="127.0.0.1", port=port, protocol=3, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)
    if cached:
        options["cache_config"] = CacheConfig(max_size=CACHE_SIZE)
    return redis.Redis(**options)


def zipf_keys(keys, count, seed):
    """count keys drawn with weight 1/rank^s; rank 1 is u:0."""
    names = [key(n) for n in range(keys)]
    cumulative = list(itertools.accumulate(1.0 / (rank ** ZIPF_S) for rank in range(1, keys + 1)))
    return random.Random(seed).choices(names, cum_weights=cumulative, k=count)


def preload(port, keys):
    plain = client(port)
    start = time.perf_counter()
    for first in range(0, keys, BATCH):
        pipe = plain.pipeline(transaction=False)
        for n in range(first, min(first + BATCH, keys)):
            pipe.hset(key(n), mapping={"name": f"user {n}", "portraitUri": f"https://cdn.example/p/{n}.jpg"})
        pipe.execute()
    wrote = time.perf_counter() - start
    for first in range(0, keys, BATCH):
        pipe = plain.pipeline(transaction=False)
        for n in range(first, min(first + BATCH, keys)):
            pipe.hgetall(key(n))
        replies = pipe.execute()
        missing = [first + i for i, reply in enumerate(replies) if not reply]
        if missing:
            sys.exit(f"client-cache-bench: u:{missing[0]} reads back empty after preload")
    log(f"preloaded {keys} profiles on port {port} in {wrote:.1f} s, read each once in {time.perf_counter() - start - wrote:.1f} s")
    plain.close()


def commands_processed(plain):
    return plain.info("stats").get("total_commands_processed")


def lookups(reader, writer, draws, seconds, tag, probe=None):
    """Reads through `reader`, every WRITE_EVERY-th operation a write through `writer`, for
    WARM_SECONDS unmeasured and then `seconds`; returns lookups/s, writes/s, and with `probe`
    (a function of no arguments that returns a count), the share of the measured lookups
    that reached the server by it, beyond the writes and the probe itself (else None)."""
    position = 0
    size = len(draws)

    def run(until):
        nonlocal position
        reads = writes = 0
        while time.perf_counter() < until:
            for _ in range(WRITE_EVERY - 1):
                reader.hgetall(draws[position])
                position = (position + 1) % size
            writer.hset(draws[position], "name", f"{tag} {position}")
            position = (position + 1) % size
            reads += WRITE_EVERY - 1
            writes += 1
        return reads, writes

    run(time.perf_counter() + WARM_SECONDS)
    before = probe() if probe else None
    start = time.perf_counter()
    reads, writes = run(start + seconds)
    elapsed = time.perf_counter() - start
    after = probe() if probe else None
    # The first probe counts once it has run, so it is in the difference.
    reached = None if before is None or after is None else max(0, after - before - writes - 1) / reads
    return reads / elapsed, writes / elapsed, reached


def fill(cached, draws):
    """Reads each id drawn once through the cached client, so that it holds what a renderer
    running for long holds; returns how many ids that was."""
    distinct = dict.fromkeys(draws)
    for k in distinct:
        cached.hgetall(k)
    return len(distinct)


def hit_seconds(cached):
    """What one lookup costs when the cache holds it: the hottest id read over and over for
    HIT_SECONDS, with no write anywhere."""
    count = 0
    start = time.perf_counter()
    until = start + HIT_SECONDS
    while time.perf_counter() < until:
        for _ in range(100):
            cached.hgetall(key(0))
        count += 100
    return (time.perf_counter() - start) / count


def stale_after(cached, plain, keys):
    """How many of the hottest ids the cached client reads differently from the plain one."""
    return sum(1 for n in range(min(HOT_CHECKED, keys)) if cached.hgetall(key(n)) != plain.hgetall(key(n)))


def write_to_seen(cached, plain, draws, rounds):
    """Milliseconds from each write's reply to the cached client's first read of the new value
    (None for a round that never saw it), and how many rounds saw it on the first read."""
    lags = []
    first_read = 0
    for round_ in range(rounds):
        k = draws[(round_ * 7919) % len(draws)]
        cached.hgetall(k)
        cached.hgetall(k)
        value = f"round {round_} {time.time_ns()}".encode()
        plain.hset(k, "name", value)
        acked = time.perf_counter()
        polls = 0
        while True:
            polls += 1
            seen = cached.hgetall(k).get(b"name") == value
            now = time.perf_counter()
            if seen or now - acked > POLL_LIMIT:
                break
        lags.append((now - acked) * 1000 if seen else None)
        first_read += seen and polls == 1
    return lags, first_read


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def fmt_rate(value):
    return f"{value:,.0f}"


def server_version(plain):
    info = plain.info("server")
    return info.get("redis_version"), info.get("profiled_version")


def measure(args):
    draws = zipf_keys(args.keys, DRAWS, seed=1)
    rows = []

    plain = client(args.port)
    uncached = client(args.port)
    without, without_writes, _ = lookups(uncached, plain, draws, args.seconds, "without")
    log(f"profiled, no client cache: {without:,.0f} lookups/s")
    uncached.close()

    cached = client(args.port, cached=True)
    start = time.perf_counter()
    drawn = fill(cached, draws)
    log(f"client cache filled with the {drawn:,} ids drawn in {time.perf_counter() - start:.1f} s")
    hit = hit_seconds(cached)
    log(f"a lookup the client cache holds: {hit * 1e6:.1f} us")
    with_, with_writes, reached = lookups(cached, plain, draws, args.seconds, "with", lambda: commands_processed(plain))
    log(f"profiled, client cache: {with_:,.0f} lookups/s" + (f", {100 * reached:.1f}% of them reached the server" if reached is not None else ""))
    stale = stale_after(cached, plain, args.keys)
    log(f"after the run, {stale} of the {min(HOT_CHECKED, args.keys)} hottest ids read differently through the cache")

    lags, first_read = write_to_seen(cached, plain, draws, args.rounds)
    never = lags.count(None)
    # A round that never saw its write counts as the whole wait.
    waits = [POLL_LIMIT * 1000 if lag is None else lag for lag in lags]
    p50, p99 = percentile(waits, 50), percentile(waits, 99)
    log(f"write to seen over {len(lags)} rounds: p50 {p50:.3f} ms, p99 {p99:.3f} ms, max {max(waits):.3f} ms;"
        f" {first_read} seen on the first read after the reply, {never} never seen within {POLL_LIMIT:.0f} s")
    redis_version, profiled_version = server_version(plain)
    cached.close()
    plain.close()
    rows.append((f"profiled {profiled_version} (HELLO says redis {redis_version}), no client cache", without, without_writes))
    rows.append((f"profiled, client cache (CacheConfig(max_size={CACHE_SIZE}))", with_, with_writes))

    redis_line = ""
    if args.redis_port:
        plain = client(args.redis_port)
        uncached = client(args.redis_port)
        version, _ = server_version(plain)
        redis_without, redis_writes, _ = lookups(uncached, plain, draws, args.seconds, "redis")
        log(f"redis-server {version}, no client cache: {redis_without:,.0f} lookups/s")
        rows.append((f"redis-server {version}, no client cache", redis_without, redis_writes))
        try:
            refused = client(args.redis_port, cached=True)
            refused.hgetall(key(0))
            refusal = f"redis-py's client cache accepted redis-server {version}, but it was not measured"
            refused.close()
        except redis.exceptions.ConnectionError as error:
            refusal = f"redis-py refuses its client cache with redis-server {version} (\"{error}\"), so only the uncached rate is reported for Redis"
        uncached.close()
        plain.close()
        redis_line = f"; redis-server {version} without: {fmt_rate(redis_without)} lookups/s"

    ratio = with_ / without
    print()
    print(f"| one client process, redis-py {redis.__version__}, RESP3 | lookups/s | writes/s (1%) |")
    print("|---|---:|---:|")
    for label, rate, writes in rows:
        print(f"| {label} | {fmt_rate(rate)} | {fmt_rate(writes)} |")
    print()
    print(f"client cache: without {fmt_rate(without)} lookups/s, with {fmt_rate(with_)} lookups/s ({ratio:.1f}x);"
          f" write-to-seen p50 {p50:.2f} ms, p99 {p99:.2f} ms{redis_line}")
    print(f"Goals: with the cache at least 20x without: {'met' if ratio >= 20 else 'NOT met'} ({ratio:.1f}x);"
          f" write-to-seen p99 at most 10 ms: {'met' if p99 <= 10 else 'NOT met'} ({p99:.2f} ms).")
    print(f"A lookup the client cache holds costs {hit * 1e6:.0f} us in redis-py, one that goes to profiled"
          f" {1e6 / without:.0f} us (the uncached run's mean), so even with every lookup a hit the ratio stays"
          f" under {1 / (hit * without):.1f}x in one Python process.")
    print(f"{args.keys:,} profiles, zipf s={ZIPF_S} ids, every {WRITE_EVERY}th operation an HSET through a second, uncached"
          f" client; {WARM_SECONDS:.0f} s unmeasured, then {args.seconds:g} s per run; the cached client first read"
          f" each of the {drawn:,} ids drawn once. Through the cache,"
          + (f" {100 * reached:.1f}% of lookups reached the server;" if reached is not None else "")
          + f" {stale} of the {min(HOT_CHECKED, args.keys)} hottest ids stale after the run. Write to seen:"
          f" {len(lags)} rounds, {first_read} saw the write on the first read after its reply, {never} never"
          f" (within {POLL_LIMIT:.0f} s, counted as {POLL_LIMIT * 1000:.0f} ms).")
    if args.redis_port:
        print(refusal + ".")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    load = sub.add_parser("preload", help="write the profiles, then read each once")
    load.add_argument("--port", type=int, required=True, help="the RESP port on 127.0.0.1")
    load.add_argument("--keys", type=int, default=100_000)
    run = sub.add_parser("measure", help="lookups without and with the client cache, and write to seen")
    run.add_argument("--port", type=int, required=True, help="profiled's RESP port on 127.0.0.1")
    run.add_argument("--redis-port", type=int, help="a redis-server on 127.0.0.1, preloaded the same way")
    run.add_argument("--keys", type=int, default=100_000, help="the ids preloaded (default 100000)")
    run.add_argument("--seconds", type=float, default=10, help="each measured run (default 10)")
    run.add_argument("--rounds", type=int, default=200, help="write-to-seen rounds (default 200)")
    args = parser.parse_args()
    if args.keys < 1 or args.keys > CACHE_SIZE:
        parser.error(f"--keys takes 1 to {CACHE_SIZE}, the client cache's size")
    if args.command == "preload":
        preload(args.port, args.keys)
        return
    if args.seconds <= 0 or args.seconds > 3600 or args.rounds < 1 or args.rounds > 100_000:
        parser.error("--seconds takes more than 0 up to 3600, --rounds 1 to 100000")
    measure(args)


if __name__ == "__main__":
    main()
