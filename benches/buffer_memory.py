#!/usr/bin/env python3
"""Slow uploaders and a sink origin for benches/buffer-memory.sh (asyncio, stdlib only).

Usage:
  buffer_memory.py origin HOST PORT
  buffer_memory.py client HOST PORT N SENT TRICKLE_S BATCH HOLD_S SOURCES

origin: accepts every connection (backlog 4096, RLIMIT_NOFILE raised to its hard limit) and reads
  each request whole, discarding the body: a request with a body by Content-Length is answered
  "200" (no body) only once all of it arrived, so an upload that never ends is held for as long as
  its client keeps it. Prints "listening" once bound, then every second
  "open O accepted A bytes B answered R" (connections open now, accepted since start, body bytes
  read, requests answered).

client: opens N connections to HOST:PORT, BATCH at a time (each batch waited for, every connect
  and first write bounded by 10 s), from SOURCES loopback addresses taken in turn (127.0.0.1,
  then 127.0.1.1 ... 127.0.1.250, 127.0.2.1, ...; at most 63750), so that no address holds its
  share of the last quarter of the switch's max_clients. Each sends "POST /upload HTTP/1.1" with Content-Length 1 MiB and the first SENT
  bytes of the body, then one more body byte every TRICKLE_S seconds (never the last one: the
  body never ends). Prints "ramp C/N" after each batch (stderr), "connected C failed F sent S"
  once all were tried, then after each trickle "alive A closed C statuses S" (closed: the peer
  answered, closed or reset; S: the status codes of the answers, "503:4,408:1", or "-"). On
  SIGTERM or SIGINT, or after HOLD_S seconds, closes every connection and exits.
"""
import asyncio, os, resource, signal, sys, time

BODY = 1 << 20  # Content-Length of each upload
TIMEOUT = 10.0  # bound of each connect and first write


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(want, soft)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if hard != resource.RLIM_INFINITY and hard < want:
        sys.exit(f"RLIMIT_NOFILE hard limit {hard} < {want}")


# ---------------------------------------------------------------------------------------------
# origin


async def origin(host, port):
    raise_nofile(1024)
    count = {"open": 0, "accepted": 0, "bytes": 0, "answered": 0}

    async def serve(reader, writer):
        count["open"] += 1
        count["accepted"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                while length > 0:
                    chunk = await reader.read(min(length, 65536))
                    if not chunk:
                        return
                    length -= len(chunk)
                    count["bytes"] += len(chunk)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                count["answered"] += 1
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            count["open"] -= 1
            writer.close()

    server = await asyncio.start_server(serve, host, port, backlog=4096)
    print("listening", flush=True)
    async with server:
        while True:
            await asyncio.sleep(1)
            print("open {open} accepted {accepted} bytes {bytes} answered {answered}".format(**count), flush=True)


# ---------------------------------------------------------------------------------------------
# client


class Upload:
    """One slow upload: its writer, the body bytes sent, and how it ended (None: alive)."""

    __slots__ = ("writer", "sent", "ended", "status", "task")

    def __init__(self, writer, sent):
        self.writer, self.sent, self.ended, self.status, self.task = writer, sent, False, None, None


async def watch(up, reader):
    """Marks the upload ended when the peer answers (its status kept), closes or resets."""
    try:
        data = await reader.read(4096)
        if data.startswith(b"HTTP/"):
            up.status = data.split(b" ", 2)[1].decode("ascii", "replace")
    except (ConnectionError, OSError):
        pass
    up.ended = True
    up.writer.transport.abort()


async def client(host, port, n, sent, trickle, batch, hold, sources):
    raise_nofile(n + 64)
    head = (b"POST /upload HTTP/1.1\r\nHost: example\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: %d\r\n\r\n" % BODY)
    first = head + b"u" * min(sent, BODY - 1)
    sources = max(1, min(sources, 255 * 250 + 1))
    addrs = ["127.0.0.1"] + ["127.0.%d.%d" % (1 + k // 250, 1 + k % 250) for k in range(sources - 1)]
    ups, failed, errors = [], 0, {}

    async def open_one(i):
        reader, writer = await asyncio.open_connection(host, port, local_addr=(addrs[i % len(addrs)], 0))
        writer.write(first)
        await writer.drain()
        up = Upload(writer, len(first) - len(head))
        up.task = asyncio.ensure_future(watch(up, reader))
        return up

    for start in range(0, n, batch):
        results = await asyncio.gather(
            *(asyncio.wait_for(open_one(i), TIMEOUT) for i in range(start, min(n, start + batch))),
            return_exceptions=True)
        for r in results:
            if isinstance(r, Upload):
                ups.append(r)
            else:
                failed += 1
                errors[type(r).__name__] = errors.get(type(r).__name__, 0) + 1
        print(f"ramp {min(n, start + batch)}/{n}", file=sys.stderr, flush=True)
    if errors:
        print("failures: " + ", ".join(f"{k}:{v}" for k, v in sorted(errors.items())), file=sys.stderr, flush=True)
    print(f"connected {len(ups)} failed {failed} sent {len(first) - len(head)}", flush=True)

    end = time.monotonic() + hold
    while time.monotonic() < end:
        await asyncio.sleep(min(trickle, max(0.0, end - time.monotonic())))
        for up in ups:
            if not up.ended and up.sent < BODY - 1:
                try:
                    up.writer.write(b"u")
                    up.sent += 1
                except (ConnectionError, OSError):
                    up.ended = True
        alive = sum(1 for up in ups if not up.ended)
        statuses = {}
        for up in ups:
            if up.status:
                statuses[up.status] = statuses.get(up.status, 0) + 1
        shown = ",".join(f"{k}:{v}" for k, v in sorted(statuses.items())) or "-"
        print(f"alive {alive} closed {len(ups) - alive} statuses {shown}", flush=True)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "origin" and len(sys.argv) == 4:
        coro = origin(sys.argv[2], int(sys.argv[3]))
    elif mode == "client" and len(sys.argv) == 10:
        a = sys.argv[2:]
        coro = client(a[0], int(a[1]), int(a[2]), int(a[3]), float(a[4]), int(a[5]), float(a[6]), int(a[7]))
    else:
        sys.exit(__doc__)
    loop = asyncio.new_event_loop()
    task = loop.create_task(coro)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        pass
    # Exiting closes every socket at once (the kernel sends each FIN), without tearing down
    # thousands of pending tasks one by one.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
