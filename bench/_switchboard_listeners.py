"""Bench helper (not a bench): N attached switchboard sessions in one process, on raw sockets.

    python bench/_switchboard_listeners.py URL TOKEN_PREFIX FIRST COUNT [--stall]

Opens COUNT ``subscriptions/listen`` streams, one per credential ``TOKEN_PREFIX{i}-token`` for
i in FIRST..FIRST+COUNT-1, each on its own TCP connection, and timestamps every doorbell with
``time.perf_counter()`` (CLOCK_MONOTONIC on Linux, so comparable with other processes) the moment
its bytes are read. A lean reader, so the figures are the server's fan-out, not a client SDK's
parsing of hundreds of streams in one process.

Protocol on stdin/stdout (one line each):
  -> ``ready``               every stream is acknowledged
  -> ``all TODO_ID``         every stream here has that todo's doorbell
  <- ``report``              -> one JSON line ``{todo_id: [t, ...]}``, then exit

``--stall``: open the streams, print ``ready`` after the acks, then never read again (a stalled
subscriber: the kernel's buffers fill and the server must cope) until stdin closes.
"""

from __future__ import annotations

import json
import selectors
import socket
import sys
import time

PROTOCOL = "2026-07-28"


def listen_request(host: str, port: int, token: str, rid: str) -> bytes:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "subscriptions/listen",
            "params": {
                "notifications": {"toolsListChanged": True},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"claude/channel": {}}},
                },
            },
        }
    ).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        f"accept: application/json, text/event-stream\r\nmcp-protocol-version: {PROTOCOL}\r\n"
        f"mcp-method: subscriptions/listen\r\nauthorization: Bearer {token}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def main() -> None:
    url, prefix, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    stall = "--stall" in sys.argv[5:]
    hostport = url.split("//", 1)[1].split("/", 1)[0]
    host, _, port_text = hostport.rpartition(":")
    port = int(port_text)
    sel = selectors.DefaultSelector()
    buffers: dict[socket.socket, bytes] = {}
    acked: set[socket.socket] = set()
    for i in range(first, first + count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if stall:  # a small receive window, so the server's side fills within a few hundred doorbells
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(listen_request(host, port, f"{prefix}{i}-token", f"listen-{i}"))
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ)
        buffers[sock] = b""
    stdin = sys.stdin.buffer.raw  # type: ignore[attr-defined]
    sel.register(stdin, selectors.EVENT_READ)
    received: dict[str, list[float]] = {}
    announced_ready = False
    while True:
        for key, _ in sel.select():
            if key.fileobj is stdin:
                line = stdin.readline()
                if not line or line.strip() == b"report":
                    if not stall:
                        print(json.dumps(received), flush=True)
                    return
                continue
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            data = sock.recv(1 << 16)
            now = time.perf_counter()
            if not data:
                raise SystemExit(f"listener: the server closed a stream: {buffers[sock][-300:]!r}")
            buf = buffers[sock] + data
            # Each SSE event is one "data: {json}\r\n" line (chunk-size lines never start with "data: ").
            while (start := buf.find(b"data: ")) >= 0 and (end := buf.find(b"\r\n", start)) >= 0:
                message = json.loads(buf[start + 6 : end])
                buf = buf[end + 2 :]
                method = message.get("method")
                if method == "notifications/subscriptions/acknowledged":
                    acked.add(sock)
                elif method == "notifications/claude/channel":
                    todo_id = message["params"]["meta"]["todo_id"]
                    times = received.setdefault(todo_id, [])
                    times.append(now)
                    if len(times) == count:
                        print(f"all {todo_id}", flush=True)
            if sock not in acked and buf.startswith(b"HTTP/") and not buf.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"listener: listen refused: {buf[:300]!r}")
            buffers[sock] = buf
            if not announced_ready and len(acked) == count:
                announced_ready = True
                print("ready", flush=True)
                if stall:  # stop reading the streams; only stdin (the end) is watched from now on
                    for s in buffers:
                        sel.unregister(s)
                    break


if __name__ == "__main__":
    main()
