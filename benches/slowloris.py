#!/usr/bin/env python3
"""Slowloris client for benches/slowloris.sh: holds N connections, each with a partial request head.

Usage: slowloris.py HOST PORT N PAD_BYTES HOLD_S TRICKLE_S
Opens N connections to HOST:PORT (raising its own RLIMIT_NOFILE), sends each
"GET /index.html HTTP/1.1\\r\\nHost: example\\r\\n" + about PAD_BYTES of "X-Pad-NN: ..." fields +
"User-Agent: slow" (no blank line, so the head never ends), prints "connected N failed F head_bytes B", then every
TRICKLE_S seconds sends one more byte of the User-Agent value on each connection and prints
"alive A closed C" (closed: the peer answered, closed or reset). Exits after HOLD_S seconds, or on
SIGTERM/SIGINT, closing everything.
"""
import os, resource, select, signal, socket, sys, time

host, port, n, pad, hold, trickle = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = n + 64
if soft != resource.RLIM_INFINITY and soft < want:
    if hard != resource.RLIM_INFINITY and hard < want:
        sys.exit(f"RLIMIT_NOFILE hard limit {hard} < {want}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

head = b"GET /index.html HTTP/1.1\r\nHost: example\r\n"
i = 0
while pad > 0 and len(head) < pad:  # fields of 128 bytes each, up to about PAD_BYTES
    head += b"X-Pad-%02d: " % i + b"p" * 116 + b"\r\n"
    i += 1
head += b"User-Agent: slow"

socks, failed = [], 0
deadline = time.monotonic() + 60
for _ in range(n):
    if time.monotonic() > deadline:
        break
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect((host, port))
        s.sendall(head)
        s.setblocking(False)
        socks.append(s)
    except OSError as e:
        failed += 1
        s.close()
        print(f"connect/send failed: {e}", file=sys.stderr)
print(f"connected {len(socks)} failed {failed} head_bytes {len(head)}", flush=True)

alive, closed = list(socks), 0
end = time.monotonic() + hold
while alive and time.monotonic() < end:
    time.sleep(min(trickle, max(0.0, end - time.monotonic())))
    # A connection that became readable got an answer (408/400), an EOF or a reset: count it out.
    poller = select.poll()
    for s in alive:
        poller.register(s, select.POLLIN | select.POLLERR | select.POLLHUP)
    gone = {fd for fd, _ in poller.poll(0)}
    keep = []
    for s in alive:
        try:
            if s.fileno() in gone:
                raise OSError("answered or closed")
            s.send(b"w")
            keep.append(s)
        except OSError:
            closed += 1
            s.close()
    alive = keep
    print(f"alive {len(alive)} closed {closed}", flush=True)
