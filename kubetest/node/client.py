#!/usr/bin/env python3
"""The client Pod of the real-node tests: calls the gateway from inside the cluster.

Usage: client.py PLAN.json. The plan names the gateway's base URL, the CA bundle and the token
files, and the steps: HTTP requests ({"name", "method", "path", "json" | "body"}) and WebSocket
sessions ({"name", "ws": PATH, "send": [frames], "completed": N}: the frames are sent as text
messages, then events are read until N `completed` or a `failed` event or the server closes).
Each step prints one JSON line ({"name", "status", "json" | "body", "headers"} or {"name",
"status", "events", "close"}); the last line is {"done": true}. The standard library only: it
runs in the runtime-python image, which has nothing else.
"""

import base64
import http.client
import json
import os
import socket
import ssl
import struct
import sys
import urllib.parse


def token(plan):
    with open(plan["token"]) as f:
        return f.read().strip()


def http_step(plan, step, host, port, ctx):
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=60)
    headers = {"Authorization": "Bearer " + token(plan)}
    body = None
    if "json" in step:
        body = json.dumps(step["json"]).encode()
        headers["Content-Type"] = "application/json"
    elif "body" in step:
        body = step["body"].encode()
    conn.request(step.get("method", "GET"), step["path"], body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    out = {"name": step["name"], "status": resp.status,
           "headers": {k.lower(): v for k, v in resp.getheaders()}}
    try:
        out["json"] = json.loads(data)
    except ValueError:
        out["body"] = data.decode("utf-8", "replace")
    conn.close()
    return out


def ws_frame(payload: bytes, opcode=0x1) -> bytes:
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf


def read_frame(sock):
    b0, b1 = read_exact(sock, 2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", read_exact(sock, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", read_exact(sock, 8))[0]
    if b1 & 0x80:
        raise ValueError("the server masked a frame")
    return b0 & 0x0F, read_exact(sock, n)


def ws_step(plan, step, host, port, ctx):
    raw = socket.create_connection((host, port), timeout=60)
    sock = ctx.wrap_socket(raw, server_hostname=host)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {step['ws']} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                  f"Authorization: Bearer {token(plan)}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            raise EOFError("closed during the upgrade")
        head += chunk
    status = int(head.split(b" ", 2)[1])
    out = {"name": step["name"], "status": status, "events": [], "close": None}
    if status != 101:
        out["body"] = head.decode("utf-8", "replace")
        return out
    for frame in step["send"]:
        sock.sendall(ws_frame(json.dumps(frame).encode()))
    completed = 0
    while completed < step.get("completed", 1):
        opcode, payload = read_frame(sock)
        if opcode == 0x8:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
            out["close"] = {"code": code, "reason": payload[2:].decode("utf-8", "replace")}
            break
        if opcode == 0x9:
            sock.sendall(ws_frame(payload, 0xA))
            continue
        if opcode != 0x1:
            continue
        event = json.loads(payload)
        out["events"].append(event)
        if event.get("type") == "completed":
            completed += 1
        elif event.get("type") == "failed":
            break
    sock.sendall(ws_frame(struct.pack("!H", 1000), 0x8))
    sock.close()
    return out


def main():
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    url = urllib.parse.urlsplit(plan["base"])
    host, port = url.hostname, url.port or 443
    ctx = ssl.create_default_context(cafile=plan["ca"])
    for step in plan["steps"]:
        try:
            out = ws_step(plan, step, host, port, ctx) if "ws" in step else http_step(plan, step, host, port, ctx)
        except Exception as e:  # reported, and the next step still runs
            out = {"name": step["name"], "error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)
    print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    main()
