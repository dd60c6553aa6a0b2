#!/usr/bin/env python3
"""Asks a DNS server for NAME's A record over UDP and checks the answer holds ADDRESS.

Usage: dns_query.py SERVER NAME ADDRESS   (exit 0 when it does; the standard library only, so
it runs in the node's network namespace without dig)."""

import random
import socket
import struct
import sys


def query(server: str, name: str) -> list[str]:
    ident = random.randrange(1 << 16)
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
    packet = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + struct.pack("!HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(packet, (server, 53))
        data, _ = s.recvfrom(4096)
    rid, flags, qd, an, _, _ = struct.unpack("!HHHHHH", data[:12])
    if rid != ident or flags & 0x000F:
        raise SystemExit(f"answer id {rid} rcode {flags & 0xF}")
    i = 12
    for _ in range(qd):  # skip the question
        while data[i]:
            i += data[i] + 1
        i += 5
    addresses = []
    for _ in range(an):
        i += 2 if data[i] & 0xC0 == 0xC0 else len(data[i:].split(b"\0", 1)[0]) + 1
        rtype, _, _, length = struct.unpack("!HHIH", data[i:i + 10])
        i += 10
        if rtype == 1 and length == 4:
            addresses.append(socket.inet_ntoa(data[i:i + 4]))
        i += length
    return addresses


if __name__ == "__main__":
    server, name, address = sys.argv[1:4]
    got = query(server, name)
    sys.exit(0 if address in got else f"{name}: {got}, not {address}")
