#!/usr/bin/env python3
"""tls-passthrough probes, old vs new. Usage: passthrough_probes.py"""
import json, ssl, socket, sys, time, threading
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *
from reload_probes import admin_req

def hello(sni):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    s = ctx.wrap_bio(i, o, server_hostname=sni)
    try: s.do_handshake()
    except ssl.SSLWantReadError: pass
    return o.read()

def h_tls(be, c, n):
    c.settimeout(2)
    got = b""
    try:
        while len(got) < 5 or len(got) < 5 + int.from_bytes(got[3:5], "big") + (108 if got.startswith(b"PROXY") else 0):
            d = c.recv(65536)
            if not d: break
            got += d
            if got.startswith(b"PROXY") and b"\r\n" in got:
                pass
    except socket.timeout: pass
    be.log.append((n, got[:60] if got.startswith(b"PROXY") else got[:5], len(got)))
    if be.mode == "answer":
        c.sendall(b"\x16\x03\x03\x00\x02ok" + b"server-bytes")
        try:
            while True:
                d = c.recv(65536)
                if not d: break
                c.sendall(b"echo:" + d)
        except OSError: pass
    elif be.mode == "close":
        return

def text(port, admin, a, b, proxy=""):
    return f"""[switch]
idle_timeout = "2s"
header_timeout = "2s"
workers = 1
access_log = false
[admin]
listen = "127.0.0.1:{admin}"
[virtual.pt]
listen = "127.0.0.1:{port}"
mode = "tls-passthrough"
default_pool = "b"
[[virtual.pt.rule]]
sni = '^a\\.example$'
pool = "a"
[pool.a]
{proxy}
servers = [{{ addr = "127.0.0.1:{a.port}" }}]
[pool.b]
servers = [{{ addr = "127.0.0.1:{b.port}" }}]
"""

def run(binary, proxy=""):
    a, b = Backend(h_tls), Backend(h_tls); a.mode = "answer"; b.mode = "close"
    port, admin = free_port(), free_port()
    p = start_switch(binary, text(port, admin, a, b, proxy), port)
    out = []
    try:
        time.sleep(0.3)
        ha = hello("a.example"); hb = hello("b.example")
        probes = [
            ("sni a", [ha, 0.3, b"data", 0.3]),
            ("sni b (server closes)", [hb, 0.5]),
            ("sni a fragmented", [ha[:3], 0.3, ha[3:20], 0.3, ha[20:], 0.3, b"data"]),
            ("no tls", [b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"]),
            ("partial hello then stall", [ha[:40]]),
            ("hello + extra record in same write", [ha + b"\x17\x03\x03\x00\x01X", 0.3]),
            ("sni a halfclose", ("shut", [ha, 0.3])),
        ]
        for name, spec in probes:
            a.log.clear(); b.log.clear()
            if isinstance(spec, tuple): got = talk(port, spec[1], 3.0, shut=True)
            else: got = talk(port, spec, 3.0)
            time.sleep(0.2)
            out.append((name, got[-60:], list(a.log), list(b.log)))
        st, body = admin_req(admin, "GET", "/stats")
        d = json.loads(body)
        out.append(("service stats", {k: d["services"][0][k] for k in ("connections", "requests", "local_errors", "tls_handshake_failures", "responses")}))
        out.append(("server stats", [[(x["state"], x["requests"], x["failures"], x["responses"], x["bytes_in"], x["bytes_out"]) for x in pp["servers"]] for pp in d["pools"]]))
    finally:
        p.terminate(); p.wait()
    return out

if __name__ == "__main__":
    for proxy in ("", 'send_proxy = "v1"'):
        res = {}
        th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k], proxy))) for k in BINS]
        for t in th: t.start()
        for t in th: t.join()
        print("==== send_proxy:", proxy or "none")
        for o, n in zip(res["old"], res["new"]):
            import re
            no = re.sub(r"\d{5}", "P", repr(o)); nn = re.sub(r"\d{5}", "P", repr(n))
            print(f"### {o[0]}: {'SAME' if no == nn else 'DIFF'}")
            print("  old:", no); print("  new:", nn)
