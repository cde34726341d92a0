#!/usr/bin/env python3
"""Sends the same RESP byte sequences to a reference Redis server and to a subject, and
compares the replies byte for byte.

Only exchanges where the RESP front's contract promises Redis's exact behaviour are sent:
the hash commands on the fields `name` and `portraitUri` with non-empty values, DEL, UNLINK,
EXISTS, TYPE, TTL, PTTL, SCAN (the set of keys a full scan returns, not its order or its
cursors), MULTI/EXEC/DISCARD, error texts, protocol errors, inline commands, pipelined
requests and frames split across reads. Every key is a valid profile userId. HELLO's reply
names the version, so only the parts the two share are compared.

Each scenario starts with FLUSHALL on a new connection, runs on the reference, then on the
subject, so both sides may even be the same server. The reference must be a redis-server
started with `--databases 1` (so that `SELECT 1` is refused, as the contract says),
`--hash-max-listpack-value 4096` (Redis returns a hash's fields in the order they were
written only while its values are short enough for its compact encoding, and a profile's
portraitUri may have 2,048 bytes) and, with --token, `--requirepass TOKEN`; the subject then
needs the token with the admin role.

Usage: resp_differential.py --reference HOST:PORT --subject HOST:PORT [--token TOKEN]
                            [--only SCENARIO ...]
Exits 0 when every reply matched, 1 when some differed (each difference is printed with its
scenario, step, request and both replies), 2 when the arguments are wrong.
"""

import argparse
import random
import socket
import ssl
import sys
import time

READ_TIMEOUT_SECONDS = 3.0
# Between two pieces of a split request, so that the server reads them separately.
PIECE_PAUSE_SECONDS = 0.001


def encode(*args):
    """A multibulk request of `args` (str or bytes)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def shown(data, limit=300):
    """Bytes as a Python literal, cut in the middle when long; anything else as text."""
    if not isinstance(data, (bytes, bytearray)):
        return str(data)
    text = repr(bytes(data))
    if len(text) > limit:
        text = text[: limit // 2] + " ... " + text[-limit // 2 :] + " (%d bytes)" % len(data)
    return text


def argument_label(arg):
    """An argument as a failure message shows it: text as it is unless long, bytes as a literal."""
    if isinstance(arg, bytes):
        return shown(arg, 80)
    if len(arg) > 40:
        return "%s...(%d characters)" % (arg[:20], len(arg))
    return repr(arg) if not arg or any(ord(c) < 0x20 for c in arg) else arg


class Closed(Exception):
    """The server closed the connection."""


class NoReply(Exception):
    """Nothing more arrived within READ_TIMEOUT_SECONDS."""


class NotRESP(Exception):
    """The bytes received are not a RESP reply."""


class Connection:
    """One TCP connection and the bytes received on it and not yet taken as replies."""

    def __init__(self, address, tls_ca=None):
        self.sock = socket.create_connection(address, timeout=READ_TIMEOUT_SECONDS)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_ca is not None:
            self.sock = ssl.create_default_context(cafile=tls_ca).wrap_socket(self.sock, server_hostname=address[0])
        self.buffer = bytearray()
        self.broken = None

    def close(self):
        self.sock.close()

    def send(self, data, pieces=None):
        """Sends `data` whole, or as the successive slices whose sizes `pieces` lists."""
        if pieces is None:
            self.sock.sendall(data)
            return
        offset = 0
        for size in pieces:
            self.sock.sendall(data[offset : offset + size])
            offset += size
            time.sleep(PIECE_PAUSE_SECONDS)
        assert offset == len(data), "pieces do not add up to the request"

    def _fill(self):
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise NoReply()
        except (ConnectionResetError, ssl.SSLError):
            raise Closed()
        if not data:
            raise Closed()
        self.buffer += data

    def _line_end(self, start):
        while True:
            end = self.buffer.find(b"\r\n", start)
            if end >= 0:
                return end
            self._fill()

    def _value(self, start):
        """Parses the reply at `start`; returns (value, end). Simple strings, errors and
        numbers are (type byte, text); aggregates are lists, maps lists of pairs."""
        end = self._line_end(start)
        kind = self.buffer[start : start + 1]
        header = bytes(self.buffer[start + 1 : end])
        after = end + 2
        if kind in (b"+", b"-", b":", b"_", b",", b"#", b"("):
            return (kind, header), after
        try:
            count = int(header)
        except ValueError:
            raise NotRESP()
        if kind in (b"$", b"!", b"="):
            if count < 0:
                return None, after
            while len(self.buffer) < after + count + 2:
                self._fill()
            return bytes(self.buffer[after : after + count]), after + count + 2
        if kind in (b"*", b"~", b">", b"%", b"|"):
            if count < 0:
                return None, after
            items = []
            for _ in range(count * 2 if kind in (b"%", b"|") else count):
                item, after = self._value(after)
                items.append(item)
            if kind in (b"%", b"|"):
                items = list(zip(items[0::2], items[1::2]))
            if kind == b"|":  # an attribute comes before the reply it annotates
                return self._value(after)
            return items, after
        raise NotRESP()

    def reply(self):
        """The next whole reply: (its bytes, its value)."""
        value, end = self._value(0)
        data = bytes(self.buffer[:end])
        del self.buffer[:end]
        return data, value

    def rest_until_close(self):
        """Every byte until the server closes; raises NoReply if it does not."""
        while True:
            try:
                self._fill()
            except Closed:
                data = bytes(self.buffer)
                self.buffer.clear()
                return data


class ScanOutcome:
    """What a full scan returned: the set of keys, and those returned more than once."""

    def __init__(self, seen):
        self.keys = frozenset(seen)
        self.repeated = sorted({key for key in seen if seen.count(key) > 1}) if len(seen) != len(self.keys) else []

    def __eq__(self, other):
        return isinstance(other, ScanOutcome) and (self.keys, self.repeated) == (other.keys, other.repeated)

    def __repr__(self):
        return "%d keys, %d returned more than once" % (len(self.keys), len(self.repeated))

    def difference(self, other):
        """How `other` (the subject's) departs from this one (redis's)."""
        def some(keys):
            keys = sorted(keys)
            return shown(b" ".join(keys[:10]) + (b" ..." if len(keys) > 10 else b""), 400) + " (%d)" % len(keys)
        parts = []
        if self.keys - other.keys:
            parts.append("missing from the subject's scan: " + some(self.keys - other.keys))
        if other.keys - self.keys:
            parts.append("returned by the subject but not by redis: " + some(other.keys - self.keys))
        if other.repeated != self.repeated:
            parts.append("returned more than once by the subject: " + some(other.repeated))
        return "; ".join(parts)


class Side:
    """One server's run of a scenario: its connections and, step by step, what it answered."""

    def __init__(self, address, token, tls_ca=None):
        self.address = address
        self.tls_ca = tls_ca
        self.token = token
        self.steps = []
        self.connections = []
        # Whether a reply did not come within READ_TIMEOUT_SECONDS.
        self.stalled = False

    def record(self, connection, request, outcome):
        self.steps.append((self.connections.index(connection) + 1, request, outcome))

    def connection(self):
        """A new connection, authenticated first when there is a token."""
        connection = Connection(self.address, self.tls_ca)
        self.connections.append(connection)
        if self.token is not None:
            self.call(connection, "AUTH", self.token)
        return connection

    def close(self):
        for connection in self.connections:
            connection.close()

    def exchange(self, connection, request, replies, pieces=None, label=None):
        """Sends `request` and reads `replies` replies; returns their values (None for any
        that did not come), and records their bytes."""
        label = label or shown(request)
        if connection.broken:
            self.record(connection, label, [connection.broken])
            return [None] * replies
        outcome, values = [], []
        try:
            connection.send(request, pieces)
            for _ in range(replies):
                data, value = connection.reply()
                outcome.append(data)
                values.append(value)
        except (Closed, BrokenPipeError, ConnectionResetError):
            connection.broken = "<the connection was closed>"
            outcome.append(shown(bytes(connection.buffer)) + " then the connection was closed")
        except NoReply:
            self.stalled = True
            connection.broken = "<no reply to an earlier request: connection abandoned>"
            outcome.append("no reply within %g s after %s" % (READ_TIMEOUT_SECONDS, shown(bytes(connection.buffer))))
        except NotRESP:
            connection.broken = "<unparsable bytes earlier: connection abandoned>"
            outcome.append("not a RESP reply: " + shown(bytes(connection.buffer)))
        self.record(connection, label, outcome)
        return values + [None] * (replies - len(values))

    def call(self, connection, *args, pieces=None):
        """Sends one command as a multibulk; returns the value of its reply."""
        return self.exchange(connection, encode(*args), 1, pieces=pieces, label=" ".join(map(argument_label, args)))[0]

    def inline(self, connection, line, replies=1, pieces=None):
        return self.exchange(connection, line, replies, pieces=pieces)

    def refused(self, connection, request, pieces=None, label=None):
        """Sends a request that must end the connection: records every byte until the close."""
        label = label or shown(request)
        try:
            connection.send(request, pieces)
            data = connection.rest_until_close()
            outcome = shown(data) + " then the connection was closed"
        except (BrokenPipeError, ConnectionResetError):
            outcome = shown(bytes(connection.buffer)) + " then the connection was reset while sending"
        except NoReply:
            outcome = shown(bytes(connection.buffer)) + " and the connection stayed open %g s" % READ_TIMEOUT_SECONDS
        connection.broken = "<the connection was closed>"
        self.record(connection, label, [outcome])

    def full_scan(self, connection, *options):
        """SCAN from cursor 0 until it returns 0; records the keys found, sorted, and any
        returned more than once. Order and cursors are not compared."""
        label = "a full SCAN " + " ".join(options) if options else "a full SCAN"
        seen, cursor, calls = [], "0", 0
        while True:
            values = self.exchange(connection, encode("SCAN", cursor, *options), 1, label="SCAN %s %s" % (cursor, " ".join(options)))
            self.steps.pop()  # the pages differ between servers; only the whole is compared
            value = values[0]
            calls += 1
            if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], bytes) and isinstance(value[1], list)):
                self.record(connection, label, ["SCAN %s answered %r" % (cursor, value)])
                return
            seen += value[1]
            cursor = value[0].decode()
            if cursor == "0":
                break
            if calls > 100_000:
                self.record(connection, label, ["still not back at cursor 0 after 100,000 calls"])
                return
        self.record(connection, label, [ScanOutcome(seen)])

    def hello(self, connection, *args):
        """HELLO, compared on what Redis and profiled share: the fields present (but for
        profiled's own `profiled_version`), and server, proto, mode, role and modules, not the
        version. Errors are compared whole."""
        values = self.exchange(connection, encode("HELLO", *args), 1, label=" ".join(("HELLO",) + args))
        data = self.steps[-1][2][0]
        value = values[0]
        if isinstance(value, list):
            pairs = value if value and isinstance(value[0], tuple) else list(zip(value[0::2], value[1::2]))
            fields = dict(pairs)
            fields.pop(b"profiled_version", None)
            shared = {k: fields.get(k) for k in (b"server", b"proto", b"mode", b"role", b"modules")}
            kind = "map" if data.startswith(b"%") else "array"
            self.steps[-1] = self.steps[-1][:2] + (["a %s of fields %s; %s" % (kind, sorted(fields), shared)],)


def scenario(function):
    SCENARIOS.append(function)
    return function


SCENARIOS = []


def profile(key, name, uri):
    return ("HSET", key, "name", name, "portraitUri", uri)


@scenario
def ping_and_echo(s):
    c = s.connection()
    s.call(c, "PING")
    s.call(c, "ping")
    s.call(c, "PiNg", "hello there")
    s.call(c, "ECHO", "hello world")
    s.call(c, "echo", "小明 \r\n and a CR LF")
    s.call(c, "ECHO", "")
    s.call(c, "PING", "a", "b")
    s.call(c, "ECHO")
    s.call(c, "ECHO", "a", "b")


@scenario
def hash_reads_and_writes(s):
    c = s.connection()
    s.call(c, *profile("u1", "Ann Lee", "https://cdn.example/p/1.png"))
    s.call(c, *profile("u1", "Ann Lee", "https://cdn.example/p/1.png"))
    s.call(c, "HSET", "u1", "name", "Bea")
    s.call(c, "HGET", "u1", "name")
    s.call(c, "hget", "u1", "portraitUri")
    s.call(c, "HGET", "missing", "name")
    s.call(c, "HMGET", "u1", "name", "portraitUri", "name")
    s.call(c, "HMGET", "missing", "name", "portraitUri")
    s.call(c, "HGETALL", "u1")
    s.call(c, "HgEtAlL", "missing")
    for command in ("HEXISTS", "HSTRLEN"):
        s.call(c, command, "u1", "name")
        s.call(c, command, "u1", "portraitUri")
        s.call(c, command, "missing", "name")
    for command in ("HLEN", "HKEYS", "HVALS"):
        s.call(c, command, "u1")
        s.call(c, command, "missing")
    s.call(c, "HSET", "u2", "name", "小明", "portraitUri", "https://cdn.example/p/小明.png")
    s.call(c, "HGETALL", "u2")
    s.call(c, "HMSET", "u3", "name", "Cy", "portraitUri", "https://cdn.example/p/3.png")
    s.call(c, "HMSET", "u3", "name", "Dee")
    s.call(c, "HGETALL", "u3")
    # A write through one connection is read at once through another.
    other = s.connection()
    s.call(other, "HGETALL", "u3")


@scenario
def partial_profiles_and_deleting_fields(s):
    c = s.connection()
    s.call(c, "HSETNX", "n1", "name", "Eve")
    s.call(c, "HSETNX", "n1", "name", "Fay")
    s.call(c, "HGETALL", "n1")
    s.call(c, "HLEN", "n1")
    s.call(c, "HEXISTS", "n1", "portraitUri")
    s.call(c, "HKEYS", "n1")
    s.call(c, "HSETNX", "n1", "portraitUri", "https://cdn.example/p/n1.png")
    s.call(c, "HVALS", "n1")
    s.call(c, "HSET", "n2", "portraitUri", "https://cdn.example/p/n2.png")
    s.call(c, "HGETALL", "n2")
    s.call(c, "HGET", "n2", "name")
    s.call(c, "HMGET", "n2", "name", "portraitUri")
    s.call(c, *profile("d1", "Gus", "https://cdn.example/p/d1.png"))
    s.call(c, "HDEL", "d1", "name")
    s.call(c, "HGETALL", "d1")
    s.call(c, "HDEL", "d1", "name")
    s.call(c, "EXISTS", "d1")
    s.call(c, "HDEL", "d1", "portraitUri", "name")
    s.call(c, "EXISTS", "d1")
    s.call(c, "TYPE", "d1")
    s.call(c, "HGETALL", "d1")
    s.call(c, *profile("d2", "Hal", "https://cdn.example/p/d2.png"))
    s.call(c, "HDEL", "d2", "name", "portraitUri", "name")
    s.call(c, "EXISTS", "d2")
    s.call(c, "HDEL", "missing", "name")
    # A field named twice in one HSET counts once, and its last value stays.
    s.call(c, "HSET", "r1", "name", "first", "name", "second", "portraitUri", "u")
    s.call(c, "HGETALL", "r1")


@scenario
def longest_values_and_keys(s):
    c = s.connection()
    name = ("名" * 85 + "x").encode()  # 256 bytes
    uri = ("https://cdn.example/" + "p" * 2028).encode()  # 2,048 bytes
    longest_key = "k" * 128
    s.call(c, "HSET", longest_key, "name", name, "portraitUri", uri)
    s.call(c, "HGETALL", longest_key)
    s.call(c, "HSTRLEN", longest_key, "name")
    s.call(c, "HSTRLEN", longest_key, "portraitUri")
    s.call(c, "HSET", "用户-42", "name", "Ivy", "portraitUri", uri)
    s.call(c, "HMGET", "用户-42", "portraitUri", "name")
    s.call(c, "EXISTS", longest_key, "用户-42")


@scenario
def del_unlink_exists_type_ttl(s):
    c = s.connection()
    s.call(c, *profile("a", "A", "https://cdn.example/p/a.png"))
    s.call(c, *profile("b", "B", "https://cdn.example/p/b.png"))
    s.call(c, "EXISTS", "a")
    s.call(c, "EXISTS", "a", "a", "b", "missing", "b")
    s.call(c, "EXISTS", "missing")
    s.call(c, "EXISTS", *(["a", "b", "missing"] * 333 + ["a"]))
    for command in ("TYPE", "TTL", "PTTL"):
        s.call(c, command, "a")
        s.call(c, command, "missing")
    s.call(c, "DEL", "a", "a", "missing")
    s.call(c, "UNLINK", "b", "b")
    s.call(c, "DEL", "a")
    s.call(c, "UNLINK", "missing")
    s.call(c, "EXISTS", "a", "b")
    s.call(c, *profile("c", "C", "https://cdn.example/p/c.png"))
    s.call(c, "DEL", *(["c"] + ["gone-%d" % i for i in range(999)]))
    s.call(c, "TYPE", "c")


@scenario
def unknown_commands(s):
    c = s.connection()
    s.call(c, "FOO", "a", "b")
    s.call(c, "foo")
    s.call(c, "NoSuchCommand", "x" * 60, "y" * 60, "z" * 60, "w")
    s.call(c, "BAR", "a" * 200)
    s.call(c, "Q" * 200, "a")
    s.call(c, "FOO", "line one\r\nline two", "b")
    s.call(c, "FOO", b"before\x00after", "b")
    s.call(c, "")
    s.call(c, "PING")


@scenario
def wrong_numbers_of_arguments(s):
    c = s.connection()
    # Not `EXEC x`: Redis answers it `-EXECABORT Transaction discarded because of: wrong number
    # of arguments ...`, where RESP.md gives every command `-ERR wrong number of arguments ...`.
    for args in [("HGET", "a"), ("HSET", "a", "name"), ("HSET", "a", "name", "x", "portraitUri"),
                 ("HMSET", "a", "name"), ("HMGET", "a"), ("HGETALL",), ("HGETALL", "a", "b"),
                 ("HEXISTS", "a"), ("HLEN",), ("HSTRLEN", "a"), ("HKEYS",), ("HVALS", "a", "b"),
                 ("HDEL", "a"), ("HSETNX", "a", "name"), ("DEL",), ("UNLINK",), ("EXISTS",),
                 ("TYPE",), ("TYPE", "a", "b"), ("TTL",), ("PTTL", "a", "b"), ("SCAN",),
                 ("SELECT",), ("DBSIZE", "x"), ("hget", "a"), ("MULTI", "x"), ("DISCARD", "x"), ("AUTH",)]:
        s.call(c, *args)
    # None of these wrote anything.
    s.call(c, "EXISTS", "a")
    s.call(c, "DBSIZE")


@scenario
def protocol_errors(s):
    cases = [
        b"*abc\r\n",
        b"*3000000000\r\n",
        b"*1\r\n$-2\r\n",
        b"*1\r\n$abc\r\n",
        b"*1\r\n$600000000\r\n",
        b"*1\r\nfoo\r\n",
        b"*2\r\n$4\r\nECHO\r\n:5\r\n",
        b'HGET "u1 name\r\n',
        b'HGET "u1"x name\r\n',
        b"ECHO 'abc\r\n",
        b"PING\r\n*1\r\n$4\r\nPING\r\n*x\r\n",
    ]
    for request in cases:
        s.refused(s.connection(), request)
        s.refused(s.connection(), request, pieces=[1] * len(request), label=shown(request) + " a byte at a time")
    s.refused(s.connection(), b"a" * 65537, label="65,537 bytes of an inline request without its LF")
    # The errors closed only their own connections.
    s.call(s.connection(), "PING")


@scenario
def inline_commands(s):
    c = s.connection()
    s.inline(c, b"PING\r\n")
    s.inline(c, b"PING\n")
    s.inline(c, b"  PING \t \r\n")
    s.inline(c, b"\r\n\n \t \r\nPING\r\n")
    s.inline(c, b"ping hello\r\n")
    s.inline(c, b"HSET in1 name \"Ann Lee\" portraitUri 'https://cdn.example/p/in 1.png'\r\n")
    s.inline(c, b"HGET in1 name\r\n")
    s.inline(c, b"HGET\tin1\tportraitUri\r\n")
    s.inline(c, b'HSET in2 name "caf\\xc3\\xa9 \\"x\\" \\\\ y" portraitUri "a\\tb\\x41\\n"\r\n')
    s.inline(c, b"HSET in3 name 'it\\'s' portraitUri u\"q r\"\r\n")
    s.call(c, "HGETALL", "in2")
    s.call(c, "HGETALL", "in3")
    s.inline(c, b"HMGET in1 name portraitUri\r\n")
    s.inline(c, b"hgetall in1\r\n")
    s.inline(c, b"FOO bar \"b a z\"\r\n")
    s.inline(c, b"HGET in1\r\n")
    s.inline(c, b"EXISTS in1 in2 in3 in1\r\n")
    s.inline(c, b"DEL in1 in2\r\n")


@scenario
def pipelined_requests(s):
    c = s.connection()
    batch = []
    for i in range(300):
        batch.append(encode(*profile("p%03d" % i, "name %d" % i, "https://cdn.example/p/%d.png" % i)))
        batch.append(b"HGET p%03d name\r\n" % i)
    batch.append(b"\r\n\r\n")
    batch.append(encode("EXISTS", *["p%03d" % i for i in range(0, 300, 7)]))
    batch.append(b"HMGET p000 portraitUri name\n")
    s.exchange(c, b"".join(batch), 602, label="300 HSETs and 300 inline HGETs, blank lines, EXISTS and HMGET in one write")
    # The same mixed pipeline, cut at random places (the same places on both servers).
    cuts = random.Random(7)
    mixed = b"".join([encode("HGETALL", "p%03d" % i) + b"HLEN p%03d\r\n" % i for i in range(40)])
    pieces = []
    left = len(mixed)
    while left:
        pieces.append(min(left, cuts.randint(1, 40)))
        left -= pieces[-1]
    s.exchange(c, mixed, 80, pieces=pieces, label="40 HGETALLs and 40 inline HLENs in %d random pieces" % len(pieces))


@scenario
def frames_split_across_reads(s):
    c = s.connection()
    request = encode("HSET", "split-1", "name", "Jo 小明", "portraitUri", "https://cdn.example/p/s1.png")
    s.exchange(c, request, 1, pieces=[1] * len(request), label="HSET a byte at a time")
    for cut in range(1, len(request)):
        again = encode("HSET", "split-1", "name", "Jo %d" % cut, "portraitUri", "https://cdn.example/p/s1.png")
        s.exchange(c, again, 1, pieces=[cut, len(again) - cut], label="HSET cut after byte %d" % cut)
    for request in [b"HGET split-1 name\r\n", encode("HMGET", "split-1", "portraitUri", "name", "name"),
                    b"HGETALL \"split-1\"\r\n", encode("EXISTS", "split-1", "missing", "split-1")]:
        s.exchange(c, request, 1, pieces=[1] * len(request), label=shown(request) + " a byte at a time")
    # Two requests in one piece, the third split over the next two.
    three = b"PING\r\n" + encode("HLEN", "split-1") + encode("ECHO", "tail")
    s.exchange(c, three, 3, pieces=[len(three) - 9, 5, 4], label="PING, HLEN and a split ECHO")
    transaction = encode("MULTI") + encode("HSET", "split-2", "name", "Kim") + encode("HGETALL", "split-2") + encode("EXEC")
    s.exchange(c, transaction, 4, pieces=[1] * len(transaction), label="MULTI ... EXEC a byte at a time")


@scenario
def transaction_commits_in_order(s):
    c = s.connection()
    s.call(c, "MULTI")
    s.call(c, *profile("t1", "Tia", "https://cdn.example/p/t1.png"))
    s.call(c, "HGET", "t1", "name")
    s.call(c, "HGETALL", "t1")
    s.call(c, "EXISTS", "t1", "t2")
    s.call(c, "HSET", "t2", "name", "Uma")
    s.call(c, "DEL", "t1")
    s.call(c, "EXISTS", "t1", "t2")
    s.call(c, "PING")
    s.call(c, "ECHO", "in a transaction")
    s.call(c, "EXEC")
    s.call(c, "HGETALL", "t2")
    s.call(c, "EXISTS", "t1")
    s.call(c, "MULTI")
    s.call(c, "EXEC")


@scenario
def transaction_discarded(s):
    c = s.connection()
    s.call(c, "MULTI")
    s.call(c, *profile("x1", "Vic", "https://cdn.example/p/x1.png"))
    s.call(c, "DISCARD")
    s.call(c, "EXISTS", "x1")
    s.call(c, "EXEC")
    s.call(c, "DISCARD")
    s.call(c, "UNWATCH")


@scenario
def transaction_aborted_by_queued_errors(s):
    c = s.connection()
    s.call(c, "MULTI")
    s.call(c, *profile("e1", "Wes", "https://cdn.example/p/e1.png"))
    s.call(c, "HGET", "e1")
    s.call(c, "HSET", "e1", "name", "Xan")
    s.call(c, "FOO", "e1")
    s.call(c, "EXEC")
    s.call(c, "EXISTS", "e1")
    s.call(c, "MULTI")
    s.call(c, "HSET", "e2", "name")
    s.call(c, "DISCARD")
    s.call(c, "EXISTS", "e2")


@scenario
def nested_multi_is_refused_and_the_transaction_stays_open(s):
    c = s.connection()
    s.call(c, "MULTI")
    s.call(c, "HSET", "m1", "name", "Yul")
    s.call(c, "MULTI")
    s.call(c, "HGET", "m1", "name")
    s.call(c, "EXEC")
    s.call(c, "EXISTS", "m1")


@scenario
def resp3_replies(s):
    c = s.connection()
    s.call(c, *profile("r3", "Zed", "https://cdn.example/p/r3.png"))
    s.hello(c, "3")
    for args in [("HGETALL", "r3"), ("HGETALL", "missing"), ("HGET", "r3", "name"), ("HGET", "missing", "name"),
                 ("HMGET", "r3", "portraitUri", "name"), ("HMGET", "missing", "name", "portraitUri"),
                 ("HKEYS", "r3"), ("HVALS", "missing"), ("EXISTS", "r3"), ("TYPE", "r3"), ("TTL", "r3"),
                 ("CLIENT", "GETNAME"), ("PING",), ("ECHO", "three"),
                 ("HSET", "r3", "name"), ("FOO", "bar")]:
        s.call(c, *args)
    s.call(c, "MULTI")
    s.call(c, "HGETALL", "r3")
    s.call(c, "HGET", "missing", "name")
    s.call(c, "HSET", "r4", "name", "Abe")
    s.call(c, "EXEC")
    s.full_scan(c)
    s.hello(c)
    s.hello(c, "2")
    s.call(c, "HGETALL", "r3")
    s.call(c, "HGET", "missing", "name")
    s.call(c, "HELLO", "4")
    s.hello(c, "3", "SETNAME", "resp3-client")
    s.call(c, "CLIENT", "GETNAME")


@scenario
def scan_covers_the_keyspace(s):
    c = s.connection()
    s.full_scan(c)
    writes = [encode(*profile("scan-%04d" % i, "n%d" % i, "https://cdn.example/p/%d.png" % i)) for i in range(2000)]
    writes += [encode(*profile("other-%d" % i, "o%d" % i, "https://cdn.example/o/%d.png" % i)) for i in range(100)]
    s.exchange(c, b"".join(writes), len(writes), label="2,100 HSETs in one write")
    s.call(c, "DBSIZE")
    s.full_scan(c)
    s.full_scan(c, "COUNT", "7")
    s.full_scan(c, "COUNT", "1000")
    for pattern in ["scan-1*", "scan-?5?0", "scan-[12]0*", "scan-[^0]00?", "scan-1[0-2]3?", "other-*",
                    "*-9*", "nomatch-*", "scan-0042"]:
        s.full_scan(c, "MATCH", pattern)
    s.full_scan(c, "TYPE", "hash")
    s.full_scan(c, "TYPE", "string")
    s.full_scan(c, "MATCH", "other-?", "COUNT", "3", "TYPE", "hash")
    s.call(c, "SCAN", "0", "COUNT", "0")
    s.call(c, "SCAN", "0", "BOGUS", "x")


@scenario
def select_config_client_flush_quit(s):
    c = s.connection()
    s.call(c, "SELECT", "0")
    s.call(c, "SELECT", "1")
    s.call(c, "CONFIG", "GET", "save")
    s.call(c, "CONFIG", "GET", "appendonly")
    s.call(c, "CONFIG", "GET", "no-such-parameter")
    s.call(c, "CLIENT", "GETNAME")
    s.call(c, "CLIENT", "SETNAME", "differential")
    s.call(c, "CLIENT", "GETNAME")
    s.call(c, *profile("f1", "Bo", "https://cdn.example/p/f1.png"))
    s.call(c, "DBSIZE")
    s.call(c, "FLUSHALL", "SYNC")
    s.call(c, "DBSIZE")
    s.call(c, *profile("f1", "Bo", "https://cdn.example/p/f1.png"))
    s.call(c, "FLUSHDB")
    s.call(c, "FLUSHALL", "ASYNC")
    s.call(c, "EXISTS", "f1")
    s.refused(c, encode("QUIT"), label="QUIT")


@scenario
def authentication(s):
    c = Connection(s.address, s.tls_ca)
    s.connections.append(c)
    s.call(c, "HGET", "a", "name")
    s.call(c, "MULTI")
    s.call(c, "AUTH", s.token + "-wrong")
    s.call(c, "AUTH", "default", s.token + "-wrong")
    s.call(c, "HELLO", "3", "AUTH", "default", s.token + "-wrong")
    s.call(c, "HGET", "a", "name")
    s.call(c, "HMGET", "a", *(["name"] * 8))  # 10 arguments: at the limit before AUTH
    s.call(c, "ECHO", "e" * 16384)  # a bulk at the limit before AUTH
    s.call(c, "AUTH", s.token)
    s.call(c, "HMGET", "a", *(["name"] * 9))
    s.call(c, "ECHO", "e" * 16385)
    s.call(c, "AUTH", "default", s.token)
    s.call(c, "HGET", "a", "name")
    for request, label in [(encode("HMGET", "a", *(["name"] * 9)), "11 arguments before AUTH"),
                           (encode("ECHO", "e" * 16385), "a bulk of 16,385 bytes before AUTH")]:
        unauthenticated = Connection(s.address, s.tls_ca)
        s.connections.append(unauthenticated)
        s.refused(unauthenticated, request, label=label)
    third = Connection(s.address, s.tls_ca)
    s.connections.append(third)
    s.hello(third, "3", "AUTH", "default", s.token)
    s.call(third, "HGET", "a", "name")


def push(s, connection, what):
    """Reads the next push (or pub/sub message) a connection has coming, sending nothing."""
    s.exchange(connection, b"", 1, label="(the next push: %s)" % what)


def client_id(s, connection):
    """The connection's CLIENT ID, which differs between servers: used, not compared."""
    value = s.exchange(connection, encode("CLIENT", "ID"), 1)[0]
    s.steps.pop()
    return value[1].decode() if isinstance(value, tuple) else "0"


@scenario
def tracking_default_mode(s):
    c, writer = s.connection(), s.connection()
    s.hello(c, "3")
    s.call(c, "CLIENT", "TRACKINGINFO")
    s.call(c, "CLIENT", "GETREDIR")
    s.call(c, "CLIENT", "TRACKING", "ON")
    s.call(c, "CLIENT", "TRACKINGINFO")
    s.call(c, "CLIENT", "GETREDIR")
    s.call(c, "HGETALL", "t1")
    s.call(c, "HGET", "t2", "name")
    s.call(c, "EXISTS", "t3", "t4")
    s.call(writer, *profile("t1", "Ana", "https://cdn.example/p/t1.png"))
    push(s, c, "t1 changed")
    s.call(writer, *profile("t4", "Bo", "https://cdn.example/p/t4.png"))
    push(s, c, "t4 changed")
    # Told once: t1 is no longer remembered until it is read again.
    s.call(writer, "HSET", "t1", "name", "Ana Li")
    s.call(writer, "HSET", "t2", "name", "Cy")
    push(s, c, "t2 changed, and nothing for t1")
    s.call(c, "HMGET", "t1", "name", "portraitUri")
    s.call(c, "HLEN", "t4")
    s.call(c, "TYPE", "t2")
    s.call(writer, "DEL", "t1", "t2", "t4")
    push(s, c, "t1 deleted")
    push(s, c, "t2 deleted")
    push(s, c, "t4 deleted")
    s.call(c, "HKEYS", "t5")
    s.call(writer, "FLUSHALL")
    push(s, c, "everything flushed")
    s.call(c, "CLIENT", "TRACKING", "OFF")
    s.call(c, "CLIENT", "TRACKINGINFO")
    s.call(c, "HGET", "t6", "name")
    s.call(writer, "HSET", "t6", "name", "Di")
    s.call(c, "PING")


@scenario
def tracking_optin_optout_noloop(s):
    c, writer = s.connection(), s.connection()
    s.hello(c, "3")
    s.call(c, "CLIENT", "CACHING", "yes")
    s.call(c, "CLIENT", "TRACKING", "ON", "OPTIN")
    s.call(c, "CLIENT", "CACHING", "no")
    s.call(c, "CLIENT", "CACHING", "maybe")
    s.call(c, "HGET", "o1", "name")
    s.call(c, "CLIENT", "CACHING", "yes")
    s.call(c, "CLIENT", "TRACKINGINFO")
    s.call(c, "HGET", "o2", "name")
    s.call(c, "HGET", "o3", "name")
    s.call(writer, "HSET", "o1", "name", "x")
    s.call(writer, "HSET", "o3", "name", "x")
    s.call(writer, "HSET", "o2", "name", "x")
    push(s, c, "o2 only: o1 was read before CACHING yes, o3 after the command it applied to")
    s.call(c, "CLIENT", "TRACKING", "ON", "OPTOUT")
    s.call(c, "CLIENT", "TRACKING", "OFF")
    s.call(c, "CLIENT", "TRACKING", "ON", "OPTOUT", "NOLOOP")
    s.call(c, "CLIENT", "TRACKINGINFO")
    s.call(c, "CLIENT", "CACHING", "no")
    s.call(c, "HGET", "o4", "name")
    s.call(c, "HGET", "o5", "name")
    s.call(c, "HGET", "o6", "name")
    s.call(c, "HSET", "o6", "name", "mine")
    s.call(writer, "HSET", "o4", "name", "x")
    s.call(writer, "HSET", "o6", "name", "x")
    s.call(writer, "HSET", "o5", "name", "x")
    push(s, c, "o5 only: o4 was read under CACHING no, o6 was this connection's own write")
    s.call(c, "PING")


@scenario
def tracking_bcast(s):
    c, writer = s.connection(), s.connection()
    s.hello(c, "3")
    s.call(c, "CLIENT", "TRACKING", "ON", "PREFIX", "a")
    s.call(c, "CLIENT", "TRACKING", "ON", "BCAST", "OPTIN")
    s.call(c, "CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT")
    s.call(c, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ab", "PREFIX", "a")
    s.call(c, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "b:", "PREFIX", "a:")
    s.call(c, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a:x")
    s.call(c, "CLIENT", "TRACKING", "ON")
    s.call(c, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "c:")
    s.call(c, "CLIENT", "TRACKINGINFO")
    s.call(writer, "HSET", "a:1", "name", "x")
    push(s, c, "a:1")
    s.call(writer, "HSET", "z:1", "name", "x")
    s.call(writer, "HSET", "b:2", "name", "x")
    push(s, c, "b:2, and nothing for z:1")
    s.call(writer, "DEL", "c:9", "b:2")
    push(s, c, "b:2 only: c:9 did not exist")
    s.call(writer, "HSET", "c:3", "name", "x")
    push(s, c, "c:3")
    s.call(c, "CLIENT", "TRACKING", "OFF")
    s.call(c, "CLIENT", "TRACKING", "ON", "BCAST")
    s.call(c, "CLIENT", "TRACKINGINFO")
    s.call(writer, "HSET", "z:1", "name", "y")
    push(s, c, "z:1, under the empty prefix")


@scenario
def tracking_errors(s):
    c = s.connection()
    s.call(c, "CLIENT", "TRACKING")
    s.call(c, "CLIENT", "TRACKING", "MAYBE")
    s.call(c, "CLIENT", "TRACKING", "ON", "BOGUS")
    s.call(c, "CLIENT", "TRACKING", "ON", "REDIRECT")
    s.call(c, "CLIENT", "TRACKING", "ON", "REDIRECT", "x")
    s.call(c, "CLIENT", "TRACKING", "ON", "REDIRECT", "987654321")
    s.call(c, "CLIENT", "TRACKING", "OFF", "BCAST", "PREFIX", "a", "PREFIX", "ab")
    s.call(c, "CLIENT", "CACHING", "yes", "no")
    s.call(c, "CLIENT", "CACHING")
    s.call(c, "CLIENT", "TRACKINGINFO", "x")
    s.call(c, "CLIENT", "GETREDIR", "x")
    s.call(c, "CLIENT", "TRACKINGINFO")


@scenario
def tracking_redirected_to_a_subscriber(s):
    listener, c, writer = s.connection(), s.connection(), s.connection()
    target = client_id(s, listener)
    s.call(listener, "UNSUBSCRIBE")
    s.call(listener, "SUBSCRIBE", "__redis__:invalidate", "news")
    s.call(listener, "HGET", "r1", "name")
    s.call(listener, "CLIENT", "ID")
    s.call(listener, "PING")
    s.call(listener, "PING", "hello")
    s.exchange(c, encode("CLIENT", "TRACKING", "ON", "REDIRECT", target), 1,
               label="CLIENT TRACKING ON REDIRECT <the subscriber's id>")
    s.call(c, "CLIENT", "TRACKING", "ON", "REDIRECT", target, "REDIRECT", target)
    redirect = s.exchange(c, encode("CLIENT", "GETREDIR"), 1, label="CLIENT GETREDIR")[0]
    s.steps[-1] = s.steps[-1][:2] + (["the subscriber's id" if redirect == (b":", target.encode()) else str(redirect)],)
    s.call(c, "HGETALL", "r1")
    s.call(writer, *profile("r1", "Ed", "https://cdn.example/p/r1.png"))
    push(s, listener, "r1, as a message")
    s.call(c, "HGET", "r2", "name")
    s.call(writer, "FLUSHALL")
    push(s, listener, "everything flushed, as a message")
    s.call(listener, "UNSUBSCRIBE", "news", "nothing")
    s.call(listener, "UNSUBSCRIBE")
    s.call(listener, "PING")
    s.call(c, "HGET", "r3", "name")
    s.call(writer, "HSET", "r3", "name", "x")
    s.call(listener, "PING")


def run_scenario(function, address, token, tls_ca=None):
    side = Side(address, token, tls_ca)
    reset = side.connection()
    side.call(reset, "FLUSHALL")
    try:
        function(side)
    finally:
        side.close()
    return side


def compare(name, reference, subject):
    """Printed differences between two runs of one scenario; empty when they agree."""
    problems = []
    unusable = 0
    for index, (ours, theirs) in enumerate(zip(reference, subject)):
        number, request, expected = ours
        got = theirs[2]
        if expected == got:
            continue
        if got and isinstance(got[0], str) and got[0].startswith("<"):
            unusable += 1  # the connection's earlier step was reported
            continue
        for reply, (want, have) in enumerate(zip(expected, got)):
            if want != have:
                break
        else:
            reply = min(len(expected), len(got))
        where = "" if len(expected) == 1 else " (reply %d of %d)" % (reply + 1, len(expected))
        want = expected[reply] if reply < len(expected) else "<nothing>"
        have = got[reply] if reply < len(got) else "<nothing>"
        if isinstance(want, ScanOutcome) and isinstance(have, ScanOutcome):
            detail = "\n  " + want.difference(have)
        else:
            detail = "\n  redis:   %s\n  subject: %s" % (shown(want), shown(have))
        problems.append("DIFFERENT %s, step %d on connection %d%s: %s%s"
                        % (name, index + 1, number, where, shown(request, 200), detail))
    if unusable:
        problems.append("DIFFERENT %s: %d later requests not answered on connections reported above" % (name, unusable))
    if len(reference) != len(subject):
        problems.append("DIFFERENT %s: %d steps on redis, %d on the subject" % (name, len(reference), len(subject)))
    return problems


def host_port(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=host_port, required=True, help="HOST:PORT of a redis-server")
    parser.add_argument("--subject", type=host_port, required=True, help="HOST:PORT of the server under test")
    parser.add_argument("--token", help="the password of the reference and an admin token of the subject")
    parser.add_argument("--only", action="append", help="run only this scenario (repeatable)")
    parser.add_argument("--subject-tls-ca", help="reach the subject over TLS, checking its certificate against this CA")
    options = parser.parse_args()
    names = [f.__name__ for f in SCENARIOS]
    for name in options.only or []:
        if name not in names:
            parser.error("no scenario %r; there are: %s" % (name, ", ".join(names)))
    problems = 0
    ran = 0
    for function in SCENARIOS:
        if options.only and function.__name__ not in options.only:
            continue
        if function is authentication and options.token is None:
            continue
        runs, found = [], []
        for name, address, tls_ca in (("redis", options.reference, None),
                                      ("the subject", options.subject, options.subject_tls_ca)):
            try:
                runs.append(run_scenario(function, address, options.token, tls_ca))
            except OSError as error:
                found.append("FAILED %s: cannot reach %s at %s:%d: %s" % (function.__name__, name, *address, error))
        if len(runs) == 2:
            found += compare(function.__name__, runs[0].steps, runs[1].steps)
        # Printed as found, so that a run killed for taking too long shows what it had found.
        for problem in found:
            print(problem, flush=True)
        problems += len(found)
        ran += 1
        if any(run.stalled for run in runs):
            print("stopped after %s: a server did not reply within %g s" % (function.__name__, READ_TIMEOUT_SECONDS))
            break
    print("differential: %d scenarios, %d problems" % (ran, problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
