#!/usr/bin/env python3
"""The one-worker origin and the clients of benches/slow-clients.sh (issue 46). asyncio, stdlib only.

Usage:
  slow_clients.py origin PORT KEEPALIVE
      A server with ONE worker on 127.0.0.1:PORT: it accepts a connection, serves it, and only
      then accepts the next (the others wait in the listen queue, as with a CGI or a
      single-threaded application server). POST /upload reads the whole body (Content-Length or
      chunked) and answers "ok"; GET /big answers 2 MiB by Content-Length; GET /small 100 bytes;
      anything else 404. KEEPALIVE 0: every answer carries "Connection: close" and the connection
      is closed after it. KEEPALIVE 1: HTTP/1.1 keep-alive, the worker stays on the connection,
      waiting for the next request, until the peer closes it (a request that asks for close, or
      HTTP/1.0 without keep-alive, is answered and closed, as any HTTP/1.1 server does). Runs
      until killed.
  slow_clients.py run SCENARIO PORT DUR
      The clients of one scenario against 127.0.0.1:PORT, then one line on stdout:
      "served=N clients=N failed=N timeouts=N p50_ms=X p99_ms=X slow_done=N slow_failed=N
      slow_kib=N".
      uploads: 20 slow uploaders, each POST /upload with Content-Length 64 KiB, 512 bytes every
        250 ms (2 KiB/s), a new connection per upload; beside them 20 honest clients in a closed
        loop of POST /upload with a 1 KiB body.
      reads: 20 slow readers, each GET /big on a socket with SO_RCVBUF 4096 and TCP_MAXSEG 1460
        set before connect, reading 2 KiB every 250 ms (8 KiB/s), a new connection per answer;
        beside them 20 honest clients in a closed loop of GET /small.
      The slow clients start 1 s before the honest ones. An honest client keeps one HTTP/1.1
      keep-alive connection, sends a request, waits for the whole answer, then sends the next; no
      request starts after DUR seconds (those in flight finish or time out, so a run lasts at
      most 1 + DUR + 5 s). A request has 5 s, connecting included when it needs a connection: a
      timeout counts as failed and the client reconnects. Served: status 200 with the full body
      ("ok", or 100 bytes); anything else (another status, a short body, a reset, a refused
      connect) is failed, and the client reconnects (after 100 ms when the connect itself
      failed). clients: honest clients that had at least one request served (one client alone
      on a kept server connection can make thousands while the 19 others starve). p50/p99:
      nearest rank over every honest request, served or failed, each at the
      time it took (a timeout at 5000 ms), so that failures cannot make a proxy look fast.
      slow_done / slow_failed: slow clients' requests answered 200 whole / ended otherwise;
      slow_kib: what they moved (sent for uploads, received for reads). The slow clients stop
      when the last honest client is done.
"""
import asyncio
import math
import socket
import sys
import time

HOST = "127.0.0.1"
BIG = 2 * 1024 * 1024
SMALL = 100
CLIENTS = 20
REQUEST_TIMEOUT = 5.0
SLOW_UPLOAD = 64 * 1024
SLOW_CHUNK = 512
SLOW_READ = 2048
SLOW_PERIOD = 0.25
HONEST_BODY = b"h" * 1024
MAX_HEAD = 64 * 1024


# ---- the origin ---------------------------------------------------------------------------------

class Conn:
    """Buffered reads over a non-blocking socket through the event loop."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.loop = asyncio.get_running_loop()

    async def fill(self) -> bool:
        data = await self.loop.sock_recv(self.sock, 65536)
        self.buf += data
        return bool(data)

    async def until(self, marker: bytes):
        while marker not in self.buf:
            if len(self.buf) > MAX_HEAD or not await self.fill():
                return None
        i = self.buf.index(marker) + len(marker)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    async def exactly(self, n: int) -> bool:
        """Consumes n bytes (a body is read and dropped); False at EOF."""
        while n > 0:
            if not self.buf and not await self.fill():
                return False
            take = min(n, len(self.buf))
            self.buf = self.buf[take:]
            n -= take
        return True

    async def chunked(self) -> bool:
        while True:
            line = await self.until(b"\r\n")
            if line is None:
                return False
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers up to the empty line
                    t = await self.until(b"\r\n")
                    if t is None:
                        return False
                    if t == b"\r\n":
                        return True
            if not await self.exactly(size + 2):
                return False


def parse_head(head: bytes):
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    fields = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip().lower()] = v.strip()
    return parts, fields


async def serve(conn: Conn, keepalive: bool, big: bytes, small: bytes):
    loop = conn.loop
    while True:
        head = await conn.until(b"\r\n\r\n")
        if head is None:
            return
        parts, fields = parse_head(head)
        if len(parts) < 3:
            return
        method, path, version = parts[0], parts[1], parts[2]
        if "chunked" in fields.get("transfer-encoding", "").lower():
            if not await conn.chunked():
                return
        elif not await conn.exactly(int(fields.get("content-length", "0") or 0)):
            return
        if method == "POST" and path == "/upload":
            status, body = "200 OK", b"ok"
        elif method == "GET" and path == "/big":
            status, body = "200 OK", big
        elif method == "GET" and path == "/small":
            status, body = "200 OK", small
        else:
            status, body = "404 Not Found", b"not found"
        token = fields.get("connection", "").lower()
        stay = keepalive and "close" not in token and (version == "HTTP/1.1" or "keep-alive" in token)
        out = (f"HTTP/1.1 {status}\r\nContent-Type: application/octet-stream\r\n"
               f"Content-Length: {len(body)}\r\n"
               f"Connection: {'keep-alive' if stay else 'close'}\r\n\r\n").encode()
        # One write: the worker is busy until the kernel took the last byte (a slow reader that
        # the proxy does not read ahead of holds it here).
        await loop.sock_sendall(conn.sock, out + body)
        if not stay:
            return


async def origin(port: int, keepalive: bool):
    big, small = b"b" * BIG, b"s" * SMALL
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((HOST, port))
    ls.listen(4096)
    ls.setblocking(False)
    loop = asyncio.get_running_loop()
    while True:  # accept, serve, next: one connection at a time
        sock, _ = await loop.sock_accept(ls)
        sock.setblocking(False)
        try:
            await serve(Conn(sock), keepalive, big, small)
        except (OSError, ValueError):
            pass
        finally:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            sock.close()


# ---- the clients --------------------------------------------------------------------------------

async def read_response(reader: asyncio.StreamReader):
    """(status, body, close) of one response; raises on EOF or a malformed answer."""
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        parts, fields = parse_head(head)
        status = int(parts[1])
        if status >= 200:
            break
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                break
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        close = False
    elif "content-length" in fields:
        body = await reader.readexactly(int(fields["content-length"]))
        close = False
    else:
        body, close = await reader.read(), True
    token = fields.get("connection", "").lower()
    close = close or "close" in token or (parts[0] == "HTTP/1.0" and "keep-alive" not in token)
    return status, body, close


class Stats:
    def __init__(self):
        self.served = self.failed = self.timeouts = 0
        self.latencies = []
        self.slow_done = self.slow_failed = self.slow_bytes = 0
        self.clients_served = 0  # honest clients with at least one request served


def close_writer(writer, abort=False):
    if writer is not None:
        if abort:
            writer.transport.abort()
        else:
            writer.close()


async def honest(port: int, scenario: str, deadline: float, stats: Stats):
    if scenario == "uploads":
        request = (b"POST /upload HTTP/1.1\r\nHost: bench\r\nContent-Type: application/octet-stream\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(HONEST_BODY)) + HONEST_BODY
        expect = b"ok"
    else:
        request = b"GET /small HTTP/1.1\r\nHost: bench\r\n\r\n"
        expect = None  # SMALL bytes from the origin
    reader = writer = None
    served_here = False

    async def once():
        nonlocal reader, writer
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection(HOST, port)
            except OSError:
                await asyncio.sleep(0.1)
                raise
        writer.write(request)
        await writer.drain()
        return await read_response(reader)

    while time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            status, body, close = await asyncio.wait_for(once(), REQUEST_TIMEOUT)
            ok = status == 200 and (body == expect if expect else len(body) == SMALL)
        except asyncio.TimeoutError:
            stats.timeouts += 1
            ok, close = False, True
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError):
            ok, close = False, True
        stats.latencies.append(time.monotonic() - t0)
        if ok:
            stats.served += 1
            if not served_here:
                served_here = True
                stats.clients_served += 1
        else:
            stats.failed += 1
        if close or not ok:
            close_writer(writer, abort=not ok)
            reader = writer = None
    close_writer(writer)


async def slow_uploader(port: int, stats: Stats):
    head = (b"POST /upload HTTP/1.1\r\nHost: bench\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: %d\r\n\r\n" % SLOW_UPLOAD)
    chunk = b"u" * SLOW_CHUNK
    while True:
        writer = None
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(head)
            for i in range(SLOW_UPLOAD // SLOW_CHUNK):
                if i:
                    await asyncio.sleep(SLOW_PERIOD)
                writer.write(chunk)
                await writer.drain()
                stats.slow_bytes += SLOW_CHUNK
            status, body, _ = await read_response(reader)
            if status == 200 and body == b"ok":
                stats.slow_done += 1
            else:
                stats.slow_failed += 1
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError):
            stats.slow_failed += 1
            await asyncio.sleep(SLOW_PERIOD)
        finally:
            close_writer(writer, abort=True)


async def slow_reader(port: int, stats: Stats):
    loop = asyncio.get_running_loop()
    request = b"GET /big HTTP/1.1\r\nHost: bench\r\n\r\n"
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1460)
            s.setblocking(False)
            await loop.sock_connect(s, (HOST, port))
            await loop.sock_sendall(s, request)
            head, want, body = b"", None, 0
            while want is None or body < want:
                await asyncio.sleep(SLOW_PERIOD)
                data = await loop.sock_recv(s, SLOW_READ)
                if not data:
                    raise ConnectionError("closed before the whole answer")
                stats.slow_bytes += len(data)
                if want is not None:
                    body += len(data)
                    continue
                head += data
                if b"\r\n\r\n" in head:
                    i = head.index(b"\r\n\r\n") + 4
                    parts, fields = parse_head(head[:i])
                    if parts[1] != "200" or "content-length" not in fields:
                        raise ConnectionError("not a 200 by length")
                    want, body = int(fields["content-length"]), len(head) - i
                elif len(head) > MAX_HEAD:
                    raise ConnectionError("no end of head")
            if body == BIG:
                stats.slow_done += 1
            else:
                stats.slow_failed += 1
        except (OSError, ValueError, IndexError):
            stats.slow_failed += 1
            await asyncio.sleep(SLOW_PERIOD)
        finally:
            s.close()


def percentile(sorted_values, p: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[max(0, math.ceil(p * len(sorted_values)) - 1)]


async def run(scenario: str, port: int, dur: float):
    stats = Stats()
    slow = slow_uploader if scenario == "uploads" else slow_reader
    slow_tasks = [asyncio.create_task(slow(port, stats)) for _ in range(CLIENTS)]
    await asyncio.sleep(1.0)
    deadline = time.monotonic() + dur
    await asyncio.gather(*(honest(port, scenario, deadline, stats) for _ in range(CLIENTS)))
    for t in slow_tasks:
        t.cancel()
    await asyncio.gather(*slow_tasks, return_exceptions=True)
    lat = sorted(stats.latencies)
    print(f"served={stats.served} clients={stats.clients_served} failed={stats.failed} timeouts={stats.timeouts} "
          f"p50_ms={percentile(lat, 0.50) * 1000:.1f} p99_ms={percentile(lat, 0.99) * 1000:.1f} "
          f"slow_done={stats.slow_done} slow_failed={stats.slow_failed} "
          f"slow_kib={stats.slow_bytes // 1024}", flush=True)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "origin":
        asyncio.run(origin(int(sys.argv[2]), sys.argv[3] == "1"))
    elif len(sys.argv) == 5 and sys.argv[1] == "run" and sys.argv[2] in ("uploads", "reads"):
        asyncio.run(run(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
