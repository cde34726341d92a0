#!/usr/bin/env python3
"""Client-side caches beside a write load: Scripts/bench --tracking-cost runs it.

    tracking-clients.py --port P --clients N --reads R --keys K --seconds S [--no-tracking]

Opens N RESP3 connections to profiled's RESP front (HELLO 3), each with CLIENT TRACKING ON
unless --no-tracking, and has each read R profiles chosen at random among u00000000 to
u<K-1> (HGETALL, the ids profilebench --preload writes), so that the server tracks about
N * R ids; then reads whatever arrives (the invalidation pushes) for S seconds, as a chat
server's client cache would, and exits. Prints how many connections, reads and pushes.
Standard library only.
"""
import argparse
import random
import selectors
import socket
import time


def command(*words):
    out = b"*%d\r\n" % len(words)
    for word in words:
        word = word.encode()
        out += b"$%d\r\n%s\r\n" % (len(word), word)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--keys", type=int, default=1000000)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--no-tracking", action="store_true")
    options = parser.parse_args()
    chooser = random.Random(1)
    selector = selectors.DefaultSelector()
    connections = []
    for _ in range(options.clients):
        connection = socket.create_connection(("127.0.0.1", options.port))
        setup = command("HELLO", "3")
        if not options.no_tracking:
            setup += command("CLIENT", "TRACKING", "ON")
        for _ in range(options.reads):
            setup += command("HGETALL", "u%08d" % chooser.randrange(options.keys))
        connection.sendall(setup)
        connection.setblocking(False)
        selector.register(connection, selectors.EVENT_READ)
        connections.append(connection)
    received = 0
    pushes = 0
    end = time.monotonic() + options.seconds
    while time.monotonic() < end:
        for key, _ in selector.select(timeout=0.1):
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            received += len(data)
            pushes += data.count(b">2\r\n$10\r\ninvalidate\r\n")
    for connection in connections:
        connection.close()
    print("%d connections%s, %d reads each, %d invalidations received (%d bytes in all)"
          % (len(connections), "" if options.no_tracking else " tracking", options.reads, pushes, received))


if __name__ == "__main__":
    main()
