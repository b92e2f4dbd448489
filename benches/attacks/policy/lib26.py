"""Shared helpers for the issue-26 attack probes: a recording backend, tcpvs and redis
processes on 127.0.0.1 (all killed on exit), raw-socket clients."""
import atexit
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time

BIN = os.environ.get("BIN", "/work/bins/tcpvs-issue26")
_procs = []


def _cleanup():
    for p in _procs:
        try:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
                p.kill()
                p.wait(timeout=5)
        except Exception:
            pass


atexit.register(_cleanup)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Backend:
    """Accepts HTTP/1.1, records each raw request head, answers by `respond(head) -> bytes`."""

    def __init__(self, respond=None):
        self.heads = []
        self.respond = respond or (lambda head: b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer: be\r\n\r\nok")
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf = b""
        c.settimeout(30)
        try:
            for _ in range(100000):
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                head += b"\r\n\r\n"
                # bodies: content-length only
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        n = int(line.split(b":", 1)[1])
                        while len(buf) < n:
                            d = c.recv(65536)
                            if not d:
                                return
                            buf += d
                        buf = buf[n:]
                with self.lock:
                    self.heads.append(head)
                c.sendall(self.respond(head))
        except OSError:
            pass
        finally:
            c.close()


class Tcpvs:
    def __init__(self, config, name="t", wait_port=None, env=None, admin=True):
        self.dir = tempfile.mkdtemp(prefix="a26-")
        self.admin_port = free_port() if admin else None
        if admin:
            config = config + f'\n[admin]\nlisten = "127.0.0.1:{self.admin_port}"\n'
        self.path = os.path.join(self.dir, "rules.toml")
        with open(self.path, "w") as f:
            f.write(config)
        self.err = open(os.path.join(self.dir, "stderr.log"), "wb")
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen([BIN, "run", "-c", self.path], stdout=self.err, stderr=self.err, env=e)
        _procs.append(self.proc)
        if wait_port:
            wait_listen(wait_port)
        if admin:
            wait_listen(self.admin_port)

    def rewrite(self, config):
        if self.admin_port:
            config = config + f'\n[admin]\nlisten = "127.0.0.1:{self.admin_port}"\n'
        with open(self.path, "w") as f:
            f.write(config)

    def reload(self):
        os.kill(self.proc.pid, signal.SIGHUP)
        time.sleep(0.5)

    def stats(self):
        return json.loads(http_get(self.admin_port, "/stats")[2])

    def metrics(self):
        return http_get(self.admin_port, "/metrics")[2].decode()

    def log(self):
        self.err.flush()
        with open(os.path.join(self.dir, "stderr.log"), "rb") as f:
            return f.read()

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Redis:
    def __init__(self, port=None):
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="a26r-")
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _procs.append(self.proc)
        wait_listen(self.port)

    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop_sig(self, stopped):
        os.kill(self.proc.pid, signal.SIGSTOP if stopped else signal.SIGCONT)


def wait_listen(port, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


class Reader:
    """Reads successive HTTP/1.1 responses from one socket, keeping what follows each."""

    def __init__(self, s):
        self.s = s
        self.buf = b""

    def _more(self):
        d = self.s.recv(65536)
        if not d:
            raise EOFError
        self.buf += d

    def response(self, timeout=5, head_request=False):
        self.s.settimeout(timeout)
        try:
            while b"\r\n\r\n" not in self.buf:
                self._more()
        except (EOFError, socket.timeout, OSError):
            return None, self.buf, b""
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        n, chunked = None, False
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v.strip())
            if k.strip().lower() == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
        if head_request or status in (204, 304) or 100 <= status < 200:
            return status, head, b""
        try:
            if n is not None:
                while len(self.buf) < n:
                    self._more()
                body, self.buf = self.buf[:n], self.buf[n:]
                return status, head, body
            if chunked:
                body = b""
                while True:
                    while b"\r\n" not in self.buf:
                        self._more()
                    line, self.buf = self.buf.split(b"\r\n", 1)
                    size = int(line.split(b";")[0], 16)
                    while len(self.buf) < size + 2:
                        self._more()
                    body += self.buf[:size]
                    self.buf = self.buf[size + 2:]
                    if size == 0:
                        return status, head, body
            while True:
                self._more()
        except (EOFError, socket.timeout, OSError):
            body, self.buf = self.buf, b""
            return status, head, body


def recv_response(s, timeout=5):
    return Reader(s).response(timeout)


def raw(port, data, timeout=5):
    """Sends raw bytes on a fresh connection; returns everything read until close/timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out = b""
    s.settimeout(timeout)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except socket.timeout:
        pass
    s.close()
    return out


def http_get(port, path, headers=b""):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"Connection: close\r\n\r\n")
    r = recv_response(s)
    s.close()
    return r


def one(port, req, timeout=5):
    """One request on a fresh connection: (status, head, body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(req)
    r = recv_response(s, timeout)
    s.close()
    return r


def pool_cfg(name, backend_port):
    return f'[pool.{name}]\nservers = [{{ addr = "127.0.0.1:{backend_port}" }}]\n'


def limited_site(port, limit, pool, workers=None):
    """A rule file: one service on `port` whose every request goes to pool `www` under the
    limit `api`, whose lines (key, rate, burst, store...) are `limit`; `pool` is the `www`
    pool's section (pool_cfg, or one of its own)."""
    switch = f"\n[switch]\nworkers = {workers}" if workers else ""
    return f'''{switch}
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"
[[virtual.web.rule]]
pool = "www"
limit = "api"
[limit.api]
{limit}
{pool}
'''
