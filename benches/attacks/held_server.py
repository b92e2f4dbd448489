#!/usr/bin/env python3
"""A client taking a healthy one-worker server down through the other clients (issue 22,
attacker's finding 1).

Usage: held_server.py TCPVS_BINARY [--hold upload|download] [--checks] [--seconds N]

Starts a backend with one worker (it serves one connection at a time, to its end; the others
wait, as in a full listen queue behind a busy worker) and `TCPVS_BINARY run` in front of it
(idle_timeout 2s, max_fails 3; with --checks, HTTP checks every 500 ms with timeout 1s and
fall 3). One attacker holds the worker for N seconds (default 12), always within idle_timeout:
  upload:   a chunked POST, one byte per second;
  download: a GET of 1 GiB, read 1 MiB per 200 ms.
Meanwhile an honest client sends a GET every second, each on a new connection; they wait
behind the attacker, and the switch answers 504 when idle_timeout runs out. Then the attacker
ends, and one more honest GET goes through. Prints the honest clients' statuses, the server's
state and the exchange errors it saw (/stats `failures`), and the last GET's status. Before this fix, the 504s (and the
checks that timed out) counted against the server: it went down, and everyone got 503 for
fail_timeout. Exit status 0 when the server stayed up and the last GET got 200.
"""
import argparse, asyncio, json, os, socket, subprocess, sys, tempfile, urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def one_worker_backend(port):
    worker = asyncio.Lock()

    async def serve(reader, writer):
        async with worker:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"POST"):
                    while not (await reader.readuntil(b"\r\n")).startswith(b"0\r\n"):
                        pass
                if head.startswith(b"GET /big"):
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (1 << 30))
                    block = b"x" * (1 << 20)
                    for _ in range(1024):
                        writer.write(block)
                        await writer.drain()
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", port, backlog=64)


async def status_of(port, request):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    status = 0
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        status = int(head.split()[1])
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError, IndexError):
        pass
    writer.close()
    return status


async def attacker(port, hold, seconds):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if hold == "upload":
        writer.write(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(seconds):
            writer.write(b"1\r\na\r\n")
            await writer.drain()
            await asyncio.sleep(1)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    else:
        writer.write(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        await writer.drain()
        for _ in range(seconds * 5):
            await reader.readexactly(1 << 20)
            await asyncio.sleep(0.2)
    writer.close()


def server_stats(admin_port):
    request = urllib.request.Request(f"http://127.0.0.1:{admin_port}/stats")
    with urllib.request.urlopen(request, timeout=5) as r:
        stats = json.load(r)
    s = stats["pools"][0]["servers"][0]
    return s["state"], s["failures"]


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("tcpvs")
    p.add_argument("--hold", choices=["upload", "download"], default="upload")
    p.add_argument("--checks", action="store_true")
    p.add_argument("--seconds", type=int, default=12)
    a = p.parse_args()
    backend_port, listen_port, admin_port = free_port(), free_port(), free_port()
    folder = tempfile.mkdtemp(prefix="tcpvs-held-")
    server = await one_worker_backend(backend_port)
    checks = 'check = "http"\ninterval = "500ms"\ntimeout = "1s"\nfall = 3\nrise = 2\n' if a.checks else ""
    rules = os.path.join(folder, "rules.toml")
    with open(rules, "w") as f:
        f.write(f"""[switch]
idle_timeout = "2s"
access_log = false
[admin]
listen = "127.0.0.1:{admin_port}"
[virtual.web]
listen = "127.0.0.1:{listen_port}"
default_pool = "app"
[pool.app]
servers = [{{ addr = "127.0.0.1:{backend_port}" }}]
[pool.app.health]
max_fails = 3
fail_timeout = "30s"
{checks}""")
    proc = subprocess.Popen([a.tcpvs, "run", "-c", rules], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", listen_port), 0.1).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # with checks: the first ones pass
        held = asyncio.create_task(attacker(listen_port, a.hold, a.seconds))
        await asyncio.sleep(0.5)
        honest = []
        for _ in range(a.seconds - 3):
            honest.append(asyncio.create_task(status_of(listen_port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")))
            await asyncio.sleep(1)
        statuses = await asyncio.gather(*honest)
        state, failures = server_stats(admin_port)
        try:
            await held
        except Exception:
            pass
        last = await status_of(listen_port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        final_state, _ = server_stats(admin_port)
        counts = {s: statuses.count(s) for s in sorted(set(statuses))}
        print(f"hold {a.hold}{' +checks' if a.checks else ''}: honest GETs meanwhile {counts}; "
              f"server {state} ({failures} exchange errors seen); after the attacker a GET got {last}, server {final_state}",
              flush=True)
        return 0 if final_state == "up" and last == 200 else 1
    finally:
        proc.terminate()
        proc.wait()
        # Connections still queued for the worker are cancelled: nothing to report.
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)
        server.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
