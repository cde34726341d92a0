#!/usr/bin/env python3
"""Checks a RESP server with redis-py, unmodified, the way an application would use it.

Every check runs four times: with redis-py's hiredis parser in RESP3 and in RESP2, and with
its pure-Python parsers (`_RESP3Parser` in RESP3, `_RESP2Parser` in RESP2). They cover HSET
with a mapping, HGETALL, HMGET, EXISTS, DELETE, scan_iter over thousands of keys (each
returned exactly once), a transactional pipeline, and with --token, AuthenticationError for a
wrong token and, with --read-token, NoPermissionError for a read-only client that writes.

The checks are generic Redis behaviour: they pass against a redis-server too (with
--read-user naming an ACL user allowed @read and @connection only).

Usage: redis_py_client.py --host HOST --port PORT [--key-prefix P] [--token T [--user U]]
                          [--read-token R [--read-user U]]
                          [--tls-ca CA [--tls-cert CERT --tls-key KEY]]
Exits 0 when every check passed; 1 when some failed, each printed as
`FAIL <parser> <protocol>: <check>: <what happened>`; 2 when redis-py or hiredis is missing.
"""

import argparse
import collections
import sys

try:
    import hiredis
    import redis
    from redis._parsers import _HiredisParser, _RESP2Parser, _RESP3Parser
    from redis.utils import HIREDIS_AVAILABLE
except ImportError as error:
    print("redis-py 8 and hiredis are needed (pip install 'redis>=8,<9' hiredis): %s" % error)
    sys.exit(2)

SCAN_KEYS = 3000
# A reply slower than this fails its check and ends the run: every later check would wait too.
REPLY_TIMEOUT_SECONDS = 5
# Keys per DEL and per pipeline execute: the RESP front takes at most 1,000 keys a command.
BATCH = 500

VARIANTS = [
    ("hiredis", _HiredisParser, 3),
    ("hiredis", _HiredisParser, 2),
    ("python", _RESP3Parser, 3),
    ("python", _RESP2Parser, 2),
]


class Failed(Exception):
    """A check's expectation did not hold."""


class Stalled(Exception):
    """The server did not reply in time."""


def expect(actual, expected, what):
    if actual != expected:
        raise Failed("%s: got %r, expected %r" % (what, actual, expected))


def expect_raises(kind, what, call):
    """Runs `call`, which must raise `kind`; returns the exception."""
    try:
        result = call()
    except kind as error:
        return error
    except Exception as error:
        raise Failed("%s: raised %s (%s), expected %s" % (what, type(error).__name__, error, kind.__name__))
    raise Failed("%s: returned %r, expected %s" % (what, result, kind.__name__))


class Run:
    """The checks of one parser and protocol, and their failures."""

    def __init__(self, options, parser_name, parser_class, protocol):
        self.options = options
        self.parser_class = parser_class
        self.protocol = protocol
        self.label = "%s RESP%d" % (parser_name, protocol)
        self.prefix = "%spy-%s-%d-" % (options.key_prefix, parser_name, protocol)
        self.failures = []
        self.passed = 0

    def client(self, username=None, password=None):
        """A client of its own pool, so each variant's connections use its parser; no
        retries, so an error reaches the check at once."""
        tls = {}
        if self.options.tls_ca:
            tls = dict(connection_class=redis.SSLConnection, ssl_ca_certs=self.options.tls_ca,
                       ssl_certfile=self.options.tls_cert, ssl_keyfile=self.options.tls_key)
        pool = redis.ConnectionPool(
            host=self.options.host, port=self.options.port, protocol=self.protocol,
            parser_class=self.parser_class, decode_responses=True, socket_timeout=REPLY_TIMEOUT_SECONDS,
            username=username, password=password, **tls)
        return redis.Redis(connection_pool=pool)

    def check(self, name, body):
        """Runs one check; prints its failure at once, so that a run killed for taking too long
        still shows what failed."""
        try:
            body()
            self.passed += 1
            return
        except Failed as failure:
            what, stalled = str(failure), False
        except Exception as error:
            what, stalled = "raised %s: %s" % (type(error).__name__, error), isinstance(error, redis.TimeoutError)
        message = "FAIL %s: %s: %s" % (self.label, name, what)
        self.failures.append(message)
        print(message, flush=True)
        if stalled:
            raise Stalled()

    def key(self, name):
        return self.prefix + name

    def fresh(self, r, *names):
        """The keys of `names`, deleted first, so that a check may run on a server that
        already holds them."""
        keys = [self.key(name) for name in names]
        r.delete(*keys)
        return keys

    def run(self):
        options = self.options
        r = self.client(options.user, options.token)
        self.check("PING answers True", lambda: expect(r.ping(), True, "ping()"))
        self.check("the connection speaks RESP%d" % self.protocol, lambda: self.check_protocol(r))
        self.check("HSET with a mapping, then HGETALL, HGET and HMGET", lambda: self.check_hash_round_trip(r))
        self.check("a missing key reads as empty", lambda: self.check_missing(r))
        self.check("UTF-8 and the longest values round-trip", lambda: self.check_longest_values(r))
        self.check("HSET of one field makes a profile with that field only", lambda: self.check_one_field(r))
        self.check("EXISTS counts repeats and DELETE counts keys removed", lambda: self.check_exists_delete(r))
        self.check("a transactional pipeline runs in order and commits", lambda: self.check_transaction(r))
        self.check("a transaction with a queued error writes nothing", lambda: self.check_aborted_transaction(r))
        self.check("scan_iter returns each of %d keys exactly once" % SCAN_KEYS, lambda: self.check_scan_iter(r))
        if options.token is not None:
            self.check("a wrong token raises AuthenticationError", lambda: self.check_wrong_token())
            self.check("no token raises AuthenticationError", lambda: self.check_no_token())
        if options.read_token is not None:
            self.check("a read-only client reads, and its writes raise NoPermissionError", lambda: self.check_read_only(r))

    def check_protocol(self, r):
        connection = r.connection_pool.get_connection()
        try:
            expect(type(connection._parser), self.parser_class, "the connection's parser")
            if self.protocol == 3:
                hello = connection.handshake_metadata or {}
                proto = hello.get("proto", hello.get(b"proto"))
                expect(proto, 3, "proto in the reply to HELLO 3")
            else:
                expect(connection.handshake_metadata, None, "the handshake of a RESP2 connection (no HELLO)")
        finally:
            r.connection_pool.release(connection)

    def check_hash_round_trip(self, r):
        key, = self.fresh(r, "ann")
        profile = {"name": "Ann Lee", "portraitUri": "https://cdn.example/p/ann.png"}
        expect(r.hset(key, mapping=profile), 2, "hset(mapping) of a new key")
        expect(r.hgetall(key), profile, "hgetall")
        expect(r.hset(key, mapping={"name": "Ann Li", "portraitUri": profile["portraitUri"]}), 0,
               "hset(mapping) of fields already present")
        expect(r.hget(key, "name"), "Ann Li", "hget name")
        expect(r.hmget(key, ["portraitUri", "name"]), [profile["portraitUri"], "Ann Li"], "hmget")
        expect(r.hmget(key, "name", "name"), ["Ann Li", "Ann Li"], "hmget of a field named twice")
        expect(r.hexists(key, "portraitUri"), True, "hexists portraitUri")
        expect(r.hlen(key), 2, "hlen")
        expect(r.type(key), "hash", "type")
        expect(r.ttl(key), -1, "ttl")

    def check_missing(self, r):
        key = self.key("nobody")
        expect(r.hgetall(key), {}, "hgetall of a missing key")
        expect(r.hget(key, "name"), None, "hget of a missing key")
        expect(r.hmget(key, ["name", "portraitUri"]), [None, None], "hmget of a missing key")
        expect(r.exists(key), 0, "exists of a missing key")
        expect(r.type(key), "none", "type of a missing key")
        expect(r.ttl(key), -2, "ttl of a missing key")

    def check_longest_values(self, r):
        key, = self.fresh(r, "名字-" + "k" * 40)
        profile = {"name": "名" * 85 + "x", "portraitUri": "https://cdn.example/" + "p" * 2028}
        expect((len(profile["name"].encode()), len(profile["portraitUri"])), (256, 2048), "the values' sizes")
        expect(r.hset(key, mapping=profile), 2, "hset(mapping) of the longest values")
        expect(r.hgetall(key), profile, "hgetall of the longest values")
        expect(r.hstrlen(key, "name"), 256, "hstrlen name")

    def check_one_field(self, r):
        key, = self.fresh(r, "only-name")
        expect(r.hset(key, "name", "Bo"), 1, "hset of one field on a new key")
        expect(r.hgetall(key), {"name": "Bo"}, "hgetall")
        expect(r.hmget(key, ["name", "portraitUri"]), ["Bo", None], "hmget")
        expect(r.hkeys(key), ["name"], "hkeys")
        expect(r.hdel(key, "name"), 1, "hdel of its only field")
        expect(r.exists(key), 0, "exists once its only field is deleted")

    def check_exists_delete(self, r):
        a, b, missing = self.fresh(r, "del-a", "del-b", "del-missing")
        for key in (a, b):
            r.hset(key, mapping={"name": "N", "portraitUri": "https://cdn.example/p/n.png"})
        expect(r.exists(a, b, a, missing), 3, "exists(a, b, a, missing)")
        expect(r.delete(a, b, missing), 2, "delete(a, b, missing)")
        expect(r.exists(a, b), 0, "exists after delete")
        expect(r.delete(a), 0, "delete of a key already deleted")

    def check_transaction(self, r):
        first, second = self.fresh(r, "tx-1", "tx-2")
        profile = {"name": "Tia", "portraitUri": "https://cdn.example/p/tx.png"}
        with r.pipeline(transaction=True) as pipe:
            pipe.hset(first, mapping=profile)
            pipe.hget(first, "name")
            pipe.hgetall(first)
            pipe.exists(first, second)
            pipe.hset(second, mapping={"name": "Uma", "portraitUri": profile["portraitUri"]})
            pipe.delete(first)
            pipe.exists(first, second)
            results = pipe.execute()
        expect(results, [2, "Tia", profile, 1, 2, 1, 1], "the transaction's replies")
        expect(r.hgetall(second), {"name": "Uma", "portraitUri": profile["portraitUri"]}, "hgetall after the transaction")
        expect(r.exists(first), 0, "exists of the key the transaction deleted")

    def check_aborted_transaction(self, r):
        key, = self.fresh(r, "tx-aborted")

        def execute():
            with r.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping={"name": "Vic", "portraitUri": "https://cdn.example/p/v.png"})
                pipe.execute_command("HGET", key)  # wrong number of arguments: refused when queued
                return pipe.execute()
        error = expect_raises(redis.ResponseError, "execute() of a transaction with a wrong HGET", execute)
        if "wrong number of arguments for 'hget' command" not in str(error):
            raise Failed("the error does not name the refused command: %s" % error)
        expect(r.exists(key), 0, "exists of the key the aborted transaction would have written")

    def check_scan_iter(self, r):
        keys = [self.key("scan-%05d" % i) for i in range(SCAN_KEYS)]
        for start in range(0, len(keys), BATCH):
            with r.pipeline(transaction=False) as pipe:
                for key in keys[start : start + BATCH]:
                    pipe.hset(key, mapping={"name": key[-5:], "portraitUri": "https://cdn.example/p/%s.png" % key[-5:]})
                replies = pipe.execute()
            expect(replies, [2] * len(replies), "the pipelined HSETs' replies")
        try:
            for count, kind in ((None, None), (250, "hash")):
                seen = collections.Counter(r.scan_iter(match=self.key("scan-*"), count=count, _type=kind))
                what = "scan_iter(match=%r, count=%r, _type=%r)" % (self.key("scan-*"), count, kind)
                repeated = sorted(key for key, times in seen.items() if times > 1)
                missing = sorted(set(keys) - set(seen))
                extra = sorted(set(seen) - set(keys))
                if repeated or missing or extra:
                    raise Failed("%s over %d keys: %d returned more than once %s, %d missing %s, %d not written %s"
                                 % (what, len(keys), len(repeated), repeated[:5], len(missing), missing[:5],
                                    len(extra), extra[:5]))
        finally:
            deleted = sum(r.delete(*keys[start : start + BATCH]) for start in range(0, len(keys), BATCH))
        expect(deleted, len(keys), "keys deleted after the scan")

    def check_wrong_token(self):
        client = self.client(self.options.user, self.options.token + "-wrong")
        expect_raises(redis.AuthenticationError, "ping() with a wrong token", client.ping)

    def check_no_token(self):
        expect_raises(redis.AuthenticationError, "hgetall() without a token",
                      lambda: self.client().hgetall(self.key("ann")))

    def check_read_only(self, r):
        key, = self.fresh(r, "read-only")
        profile = {"name": "Wes", "portraitUri": "https://cdn.example/p/w.png"}
        r.hset(key, mapping=profile)
        reader = self.client(self.options.read_user, self.options.read_token)
        expect(reader.hgetall(key), profile, "hgetall by the reader")
        expect(reader.exists(key), 1, "exists by the reader")
        expect_raises(redis.exceptions.NoPermissionError, "hset by the reader",
                      lambda: reader.hset(key, mapping={"name": "Xan", "portraitUri": profile["portraitUri"]}))
        expect_raises(redis.exceptions.NoPermissionError, "delete by the reader", lambda: reader.delete(key))
        expect(r.hgetall(key), profile, "hgetall after the reader's refused writes")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key-prefix", default="", help="put before every key (profiled's --resp-key-prefix)")
    parser.add_argument("--token", help="the password (a write or admin token) every client but the reader uses")
    parser.add_argument("--user", help="the user name sent with --token")
    parser.add_argument("--read-token", help="a token of the read role, for the NoPermissionError check")
    parser.add_argument("--read-user", help="the user name sent with --read-token")
    parser.add_argument("--tls-ca", help="connect over TLS, checking the server's certificate against this CA")
    parser.add_argument("--tls-cert", help="with --tls-ca: the client certificate to send")
    parser.add_argument("--tls-key", help="with --tls-ca: the client certificate's key")
    options = parser.parse_args()
    if options.read_token is not None and options.token is None:
        parser.error("--read-token needs --token")
    if not HIREDIS_AVAILABLE:
        print("redis-py does not accept hiredis %s: the hiredis variants cannot run" % hiredis.__version__)
        return 2
    failures, passed = [], 0
    for name, parser_class, protocol in VARIANTS:
        run = Run(options, name, parser_class, protocol)
        try:
            run.run()
        except Stalled:
            print("stopped: no reply within %d s" % REPLY_TIMEOUT_SECONDS)
            failures += run.failures
            break
        failures += run.failures
        passed += run.passed
    print("redis-py %s with hiredis %s: %d checks, %d failures" % (redis.__version__, hiredis.__version__, passed + len(failures), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
