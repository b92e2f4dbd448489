#!/usr/bin/env python3
"""The smaller probes of issue 22, against one tcpvs binary: CONNECT turned into a raw tunnel, a
server streaming `100 Continue` forever, an endless chunk extension, an empty authority.

Usage: edges.py TCPVS_BINARY

Starts one backend in this process (it answers CONNECT with 200 and then echoes; /flood with
100 Continue forever; anything else with 200 and the request head it saw) and `TCPVS_BINARY run`
in front of it (idle_timeout 2s), then prints one line per probe with what the client got.
"""
import asyncio, os, socket, subprocess, sys, tempfile, time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"CONNECT "):
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await writer.drain()
                while data := await reader.read(65536):
                    writer.write(b"raw tunnel to the server got: " + data)
                    await writer.drain()
                return
            if head.startswith(b"GET /flood "):
                for _ in range(100_000):
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await writer.drain()
                return
            if b"chunked" in head.lower():
                await asyncio.sleep(3600)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(head), head))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def exchange(port, send, read_for=5.0, then=None, done=None):
    """Sends `send`, reads what comes back for up to `read_for` seconds, until the close or
    until `done(got)` holds; `then` is sent once a response head is in."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(send)
    await writer.drain()
    got = b""
    deadline = time.monotonic() + read_for
    sent_then = False
    while time.monotonic() < deadline:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), max(0.01, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            break
        if not chunk:
            break
        got += chunk
        if done and done(got):
            break
        if then and not sent_then and b"\r\n\r\n" in got:
            writer.write(then)
            await writer.drain()
            sent_then = True
    writer.close()
    return got


def status_line(got):
    return got.split(b"\r\n", 1)[0].decode("latin-1") or "(nothing)"


async def main():
    binary = sys.argv[1]
    backend_port, listen_port = free_port(), free_port()
    server = await asyncio.start_server(serve, "127.0.0.1", backend_port)
    folder = tempfile.mkdtemp(prefix="tcpvs-edges-")
    rules = os.path.join(folder, "rules.toml")
    with open(rules, "w") as f:
        f.write(f"""[switch]
idle_timeout = "2s"
access_log = false
[virtual.web]
listen = "127.0.0.1:{listen_port}"
default_pool = "app"
[pool.app]
servers = [{{ addr = "127.0.0.1:{backend_port}" }}]
""")
    proc = subprocess.Popen([binary, "run", "-c", rules], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", listen_port), 0.1).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        # 1. CONNECT, then a request inside with a Host the rules would send elsewhere and both
        #    framing fields: does it reach the server raw?
        inner = (b"POST /admin HTTP/1.1\r\nHost: internal\r\nX-Forwarded-For: 10.0.0.1\r\n"
                 b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n")
        got = await exchange(listen_port, b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", 2.0, then=inner)
        raw = b"raw tunnel to the server got: POST /admin" in got
        print(f"CONNECT: {status_line(got)}; the request inside reached the server raw: {raw}")
        # 2. A server streaming 100 Continue forever.
        t0 = time.monotonic()
        def final_head(got):
            return any(h.startswith(b"HTTP/1.1 ") and not h.startswith(b"HTTP/1.1 100 ")
                       for h in got.split(b"\r\n\r\n")[:-1])
        got = await exchange(listen_port, b"GET /flood HTTP/1.1\r\nHost: t\r\n\r\n", 10.0, done=final_head)
        interim = got.count(b"HTTP/1.1 100 ")
        final = [l for l in got.split(b"\r\n") if l.startswith(b"HTTP/1.1 ") and not l.startswith(b"HTTP/1.1 100 ")]
        final = final[0].decode() if final else "none within 10 s"
        print(f"100 Continue forever: {interim} interim responses relayed, final answer: {final} "
              f"after {time.monotonic() - t0:.1f} s")
        # 3. An endless chunk extension (8 KiB of it, then nothing).
        got = await exchange(listen_port, b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;"
                             + b"x" * 8192, 5.0)
        print(f"chunk extension of 8 KiB: {status_line(got)}")
        # 4. An empty authority.
        got = await exchange(listen_port, b"GET http://:80/ HTTP/1.1\r\nHost: t\r\n\r\n", 3.0)
        print(f"GET http://:80/: {status_line(got)}")
    finally:
        proc.terminate()
        proc.wait()
        server.close()


if __name__ == "__main__":
    asyncio.run(main())
