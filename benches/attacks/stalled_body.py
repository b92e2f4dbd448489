#!/usr/bin/env python3
"""A client trying to take a healthy server down by stalling request bodies (issue 22, part 1).

Usage: stalled_body.py TCPVS_BINARY [--server wait|close|nginx] [--attackers N]

Starts one backend in this process and `TCPVS_BINARY run` in front of it (idle_timeout 2s,
max_fails 3, passive detection only, an admin endpoint), then, for each way of announcing a body
(Content-Length, chunked, Expect: 100-continue), opens N connections that send a request head
announcing a body and never send the body. The backend is either
  wait:  reads the head and waits for the body as long as the client takes (tcpvs's own test
         server does this), or
  close: reads the head and closes the connection 1 s later without answering, as nginx does
         when its client_body_timeout runs out;
  nginx: a real nginx (on PATH or in /usr/sbin) with client_body_timeout 1s, whose /upload
         reads the body before anything else (proxy_pass with request buffering).
After the attack, one honest GET goes through; the script prints what each attacker got, what
the honest client got, and the server's state and failure count from /stats. Before issue 22 the
attackers got 504 (wait) or 502 (close), the server was counted failed and went down, and the
honest client got 503. Exit status 0 when the server stayed up and the honest client got 200.
"""
import argparse, asyncio, json, os, socket, subprocess, sys, tempfile, urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def backend(mode, port):
    async def serve(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if b"content-length" in head.lower() or b"transfer-encoding" in head.lower():
                    if mode == "close":
                        await asyncio.sleep(1)
                        writer.close()
                        return
                    await asyncio.sleep(3600)
                body = b"ok\n"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", port)


async def status_of(port, request):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    status = 0
    try:
        while status in (0, 100):  # an interim 100 Continue, then the final answer
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            parts = head.split()
            status = int(parts[1]) if len(parts) > 1 else -1
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()
    return max(status, 0)


def start_nginx(folder, port):
    os.makedirs(os.path.join(folder, "logs"), exist_ok=True)
    conf = os.path.join(folder, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {folder}/n.pid; error_log {folder}/logs/err;
events {{ worker_connections 256; }}
http {{ access_log off; client_body_timeout 1s;
  server {{ listen 127.0.0.1:{port};
    location /upload {{ proxy_pass http://127.0.0.1:9; }}
    location / {{ return 200 "ok\\n"; }} }} }}
""")
    nginx = "nginx" if subprocess.call(["sh", "-c", "command -v nginx"], stdout=subprocess.DEVNULL) == 0 else "/usr/sbin/nginx"
    proc = subprocess.Popen([nginx, "-p", folder, "-c", conf], stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.1).close()
            break
        except OSError:
            import time
            time.sleep(0.05)
    return proc


def server_stats(admin_port):
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/stats", timeout=5) as r:
        stats = json.load(r)
    s = stats["pools"][0]["servers"][0]
    return s["state"], s["failures"]


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("tcpvs")
    p.add_argument("--server", choices=["wait", "close", "nginx"], default="wait")
    p.add_argument("--attackers", type=int, default=3)
    a = p.parse_args()
    backend_port, listen_port, admin_port = free_port(), free_port(), free_port()
    folder = tempfile.mkdtemp(prefix="tcpvs-stalled-")
    if a.server == "nginx":
        server = start_nginx(folder, backend_port)
    else:
        server = await backend(a.server, backend_port)
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
""")
    forms = {
        "content-length": b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n",
        "chunked": b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
        "expect": b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n",
    }
    ok = True
    for name, request in forms.items():
        # A switch of its own for each form: a server taken down stays down for fail_timeout.
        proc = subprocess.Popen([a.tcpvs, "run", "-c", rules], stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", listen_port), 0.1).close()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            statuses = await asyncio.gather(*(status_of(listen_port, request) for _ in range(a.attackers)))
            state, failures = server_stats(admin_port)
            honest = await status_of(listen_port, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            print(f"{a.server:5} {name:14} attackers got {sorted(statuses)}; server {state}, "
                  f"failures {failures}; an honest GET then got {honest}", flush=True)
            ok &= state == "up" and honest == 200
        finally:
            proc.terminate()
            proc.wait()
    if isinstance(server, subprocess.Popen):
        server.terminate()
        server.wait()
    else:
        server.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
