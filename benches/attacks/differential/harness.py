#!/usr/bin/env python3
"""Shared harness: a raw backend with scripted behaviours and one tcpvs per binary."""
import os, socket, subprocess, sys, tempfile, threading, time

# The two builds compared: OLD=BINARY NEW=BINARY in the environment (benches/build-at.sh COMMIT
# builds an old one).
try:
    BINS = {"old": os.environ["OLD"], "new": os.environ["NEW"]}
except KeyError:
    sys.exit("set OLD and NEW to the two tcpvs binaries to compare")

TMP = tempfile.mkdtemp(prefix="tcpvs-differential-")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def read_head(c, buf=b""):
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d: return None, buf
        buf += d
    h, _, rest = buf.partition(b"\r\n\r\n")
    return h + b"\r\n\r\n", rest

def read_body(c, head, rest):
    """Reads a body by CL or chunked; returns (body_raw, leftover)."""
    hl = head.lower()
    if b"transfer-encoding: chunked" in hl:
        buf = rest
        while True:
            # crude: wait for terminating 0 chunk + trailer end
            i = buf.find(b"\r\n0\r\n") if not buf.startswith(b"0\r\n") else 0
            if i >= 0:
                j = buf.find(b"\r\n\r\n", i if i else 0)
                if j >= 0:
                    return buf[:j+4], buf[j+4:]
            d = c.recv(65536)
            if not d: return buf, b""
            buf += d
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1]); buf = rest
            while len(buf) < n:
                d = c.recv(65536)
                if not d: break
                buf += d
            return buf[:n], buf[n:]
    return b"", rest

class Backend:
    def __init__(self, handler):
        self.port = free_port(); self.log = []; self.handler = handler; self.conns = 0
        self.s = socket.socket(); self.s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.s.bind(("127.0.0.1", self.port)); self.s.listen(128)
        threading.Thread(target=self.accept, daemon=True).start()
    def accept(self):
        while True:
            try: c, _ = self.s.accept()
            except OSError: return
            self.conns += 1
            threading.Thread(target=self.run, args=(c, self.conns), daemon=True).start()
    def run(self, c, n):
        try: self.handler(self, c, n)
        except Exception as e: self.log.append((n, "exc", repr(e)))
        finally:
            try: c.close()
            except OSError: pass

def start_switch(binary, rules_text, port, extra_wait=True):
    folder = tempfile.mkdtemp(prefix="a24-", dir=TMP)
    path = os.path.join(folder, "rules.toml")
    open(path, "w").write(rules_text)
    err = open(os.path.join(folder, "stderr"), "w")
    p = subprocess.Popen([binary, "run", "-c", path], stderr=err, stdout=err)
    for _ in range(200):
        try: socket.create_connection(("127.0.0.1", port), 0.1).close(); break
        except OSError: time.sleep(0.05)
    p.folder = folder; p.rules = path
    return p

def rules(listen, backend_ports, extra_switch="", extra_virtual="", extra_pool="", admin=None):
    servers = ", ".join(f'{{ addr = "127.0.0.1:{b}" }}' for b in backend_ports)
    a = f'[admin]\nlisten = "127.0.0.1:{admin}"\n' if admin else ""
    return f"""[switch]
idle_timeout = "3s"
workers = 1
{extra_switch}
{a}
[virtual.web]
listen = "127.0.0.1:{listen}"
default_pool = "app"
{extra_virtual}
[pool.app]
servers = [{servers}]
{extra_pool}
"""

def talk(port, chunks, read_for=3.0, shut=False, until=None):
    """Sends chunks (bytes, or float = sleep), reads until close or timeout."""
    c = socket.create_connection(("127.0.0.1", port)); c.settimeout(0.2)
    got = b""
    for ch in chunks:
        if isinstance(ch, float): 
            end = time.time() + ch
            while time.time() < end:
                try:
                    d = c.recv(65536)
                    if not d: break
                    got += d
                except socket.timeout: pass
        else: c.sendall(ch)
    if shut: c.shutdown(socket.SHUT_WR)
    end = time.time() + read_for
    closed = False
    while time.time() < end:
        try:
            d = c.recv(65536)
            if not d: closed = True; break
            got += d
            if until and until(got): break
        except socket.timeout: pass
        except ConnectionResetError: got += b"<RST>"; closed = True; break
    c.close()
    return got + (b"<CLOSED>" if closed else b"<OPEN>")


