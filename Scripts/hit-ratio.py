#!/usr/bin/env python3
"""The cache's hit ratio on seeded lookup sequences: Scripts/bench --hit-ratio runs it.

    hit-ratio.py --target profiled:PORT|memcached:PORT|redis:PORT --workload NAME
                 [--ids N] [--lookups N] [--seed N] [--value-size N]

Replays one sequence of lookups of ids u00000000 to u<ids-1> (the ids profilebench --preload
writes), pipelined 512 at a time, the first third warming the cache, and prints one line:
the workload, the target, the hit ratio of the measured lookups, and for `moving` the lookups
the cache took to follow each move.

- profiled reads through to its store on a miss: hits are counted from STATS (cache_hits
  against cache_misses), so the server must have every id the sequence reads (2 * --ids for
  the workloads with a sweep or one-hit wonders, which read a second range of ids, never
  looked up again, so that their own lookups never hit and the counts are the main traffic's).
- memcached and Redis are filled cache-aside, as a chat server would use them: every miss is
  followed by a SET of a --value-size value.

Workloads: zipf0.99, zipf0.8, zipf1.2 (Zipf's law over the ids, popularity in a seeded
random order); sweep (zipf0.99 interleaved one for one with a read of every id of the second
range in turn: a fan-out job, an export, a crawler); onehit (zipf0.99, and 30% of lookups of
ids read once only); moving (zipf0.99, and 30% of lookups of a hot set of 2,000 ids that
moves to other ids every 100,000 lookups: "follows" is how many lookups after a move the hit
ratio over 10,240 lookups is back within 0.02 of what it was before the move, on average).

Needs python3-numpy.
"""
import argparse
import socket
import sys

import numpy as np

BATCH = 512
WINDOW = 10_240
# `moving`: a hot set of HOT_IDS ids takes HOT_SHARE of the lookups, and moves to other ids
# every HOT_MOVE lookups.
HOT_IDS = 2000
HOT_SHARE = 0.3
HOT_MOVE = 100_000


def zipf_ranks(rng, ids, s, count):
    weights = 1.0 / np.arange(1, ids + 1, dtype=np.float64) ** s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return np.searchsorted(cdf, rng.random(count))


def sequence(workload, ids, lookups, seed):
    """The ids to look up, and whether each counts in the hit ratio (the main traffic)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(ids)
    if workload.startswith("zipf"):
        return order[zipf_ranks(rng, ids, float(workload[4:]), lookups)], None
    if workload == "sweep":
        main = order[zipf_ranks(rng, ids, 0.99, lookups // 2)]
        sweep = ids + np.arange(lookups // 2) % ids
        return np.column_stack((main, sweep)).ravel(), np.tile([True, False], lookups // 2)
    if workload == "onehit":
        once = rng.random(lookups) < 0.3
        out = order[zipf_ranks(rng, ids, 0.99, lookups)]
        out[once] = ids + np.arange(int(once.sum())) % ids
        return out, ~once
    if workload == "moving":
        out = order[zipf_ranks(rng, ids, 0.99, lookups)]
        hot = rng.random(lookups) < HOT_SHARE
        phase = np.arange(lookups) // HOT_MOVE
        first = rng.integers(0, ids - HOT_IDS, size=int(phase.max()) + 1)
        out[hot] = first[phase[hot]] + rng.integers(0, HOT_IDS, size=int(hot.sum()))
        return out, None
    raise SystemExit("unknown workload %s" % workload)


class Target:
    def __init__(self, kind, port, value_size):
        self.kind = kind
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.value = b"v" * value_size
        self.buffer = b""

    def read_until(self, predicate):
        while True:
            done = predicate(self.buffer)
            if done is not None:
                return done
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise SystemExit("%s closed the connection" % self.kind)
            self.buffer += chunk

    def stats(self):
        self.sock.sendall(b"STATS\n")
        end = self.read_until(lambda b: b.find(b"\nEND\n") if b"\nEND\n" in b else None)
        text, self.buffer = self.buffer[:end], self.buffer[end + 5:]
        values = {}
        for line in text.decode().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "STAT":
                values[parts[1]] = parts[2]
        return int(values["cache_hits"]), int(values["cache_misses"])

    def lookups(self, keys):
        """Looks the keys up (cache-aside fills of misses included); the hits, or None for
        profiled (whose hits STATS counts)."""
        if self.kind == "profiled":
            self.sock.sendall(b"".join(b"GET %s\n" % k for k in keys))
            # One line a reply.
            def lines(b):
                return len(b) if b.count(b"\n") >= len(keys) else None
            self.read_until(lines)
            self.buffer = b""
            return None
        if self.kind == "memcached":
            self.sock.sendall(b"".join(b"get %s\r\n" % k for k in keys))
            self.read_until(lambda b: len(b) if b.count(b"END\r\n") >= len(keys) else None)
            replies = self.buffer.split(b"END\r\n")[:len(keys)]
            self.buffer = b""
            missed = [k for k, r in zip(keys, replies) if not r]
            if missed:
                self.sock.sendall(b"".join(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, len(self.value), self.value)
                                           for k in missed))
            return len(keys) - len(missed)
        # Redis: one bulk string a reply, or a null.
        self.sock.sendall(b"".join(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k) for k in keys))
        def replies(b):
            count, at = 0, 0
            while count < len(keys):
                end = b.find(b"\r\n", at)
                if end < 0:
                    return None
                if b[at:at + 3] == b"$-1":
                    at = end + 2
                else:
                    length = int(b[at + 1:end])
                    if len(b) < end + 2 + length + 2:
                        return None
                    at = end + 2 + length + 2
                count += 1
            return at
        end = self.read_until(replies)
        data, self.buffer = self.buffer[:end], self.buffer[end:]
        missed, at = [], 0
        for k in keys:
            line_end = data.find(b"\r\n", at)
            if data[at:at + 3] == b"$-1":
                missed.append(k)
                at = line_end + 2
            else:
                at = line_end + 2 + int(data[at + 1:line_end]) + 2
        if missed:
            self.sock.sendall(b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(self.value), self.value)
                                       for k in missed))
            self.read_until(lambda b: len(b) if b.count(b"+OK\r\n") >= len(missed) else None)
            self.buffer = self.buffer[5 * len(missed):]
        return len(keys) - len(missed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=3_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--value-size", type=int, default=107)
    options = parser.parse_args()
    kind, port = options.target.split(":")
    target = Target(kind, int(port), options.value_size)
    keys, counted = sequence(options.workload, options.ids, options.lookups, options.seed)
    names = [b"u%08d" % k for k in keys.tolist()]
    counted = [True] * len(names) if counted is None else counted.tolist()
    warm = len(names) // 3 // BATCH * BATCH
    hits = total = 0
    windows = []   # (first lookup after it, hit ratio) of each window of measured lookups
    window_hits = window_total = 0
    last = None
    for start in range(0, len(names), BATCH):
        if kind == "profiled" and start == warm:
            last = target.stats()
        found = target.lookups(names[start:start + BATCH])
        if start < warm:
            continue
        window_total += sum(counted[start:start + BATCH])
        if kind != "profiled":
            window_hits += found
        # A window ends every WINDOW counted lookups, and with the run.
        if window_total >= WINDOW or start + BATCH >= len(names):
            if kind == "profiled":
                # The uncounted lookups (a sweep's, one-hit wonders') read ids read once: none hits.
                now = target.stats()
                window_hits, last = now[0] - last[0], now
            windows.append((start + BATCH, window_hits / window_total))
            hits += window_hits
            total += window_total
            window_hits = window_total = 0
    line = "%s %s hit ratio %.3f" % (options.workload, kind, hits / total)
    if options.workload == "moving":
        follows = []
        for at in range(HOT_MOVE, len(names), HOT_MOVE):
            if at < warm + 5 * WINDOW:
                continue
            before = [r for s, r in windows if at - 5 * WINDOW < s <= at]
            after = [(s, r) for s, r in windows if s > at]
            if not before or not after:
                continue
            steady = sum(before) / len(before)
            back = next((s - at for s, r in after if r >= steady - 0.02), None)
            follows.append(back if back is not None else len(names) - at)
        if follows:
            line += ", follows a move within %d lookups" % (sum(follows) // len(follows))
    print(line)


if __name__ == "__main__":
    main()
