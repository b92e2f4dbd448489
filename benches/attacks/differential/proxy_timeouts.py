#!/usr/bin/env python3
"""PROXY protocol in and out, timeouts, max_clients, CONNECT refused; old vs new. Usage: proxy_timeouts.py"""
import re, socket, sys, time, threading
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *
import http_probes as hp

def h(be, c, n):
    buf = b""
    c.settimeout(5)
    first = True
    while True:
        if first and not buf:
            try: buf = c.recv(65536)
            except OSError: return
            if buf.startswith(b"PROXY"):
                line, _, buf = buf.partition(b"\r\n"); be.log.append((n, "proxyhdr", line))
            first = False
        head, rest = read_head(c, buf)
        if head is None: be.log.append((n, "eof")); return
        body, buf = read_body(c, head, rest)
        xff = re.search(rb"X-Forwarded-For: ([^\r]*)", head)
        be.log.append((n, head.split(b"\r\n")[0], xff.group(1) if xff else None))
        if head.startswith(b"CONNECT"):
            c.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\n\r\nno"); continue
        if b"/slow" in head: time.sleep(2)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

G = hp.G
def run(binary):
    out = []
    be = Backend(h)
    # 1. send_proxy v2/v1 on an HTTP pool + proxy_protocol on the listener
    for variant in ("send_proxy", "accept_proxy"):
        port = free_port(); be.log.clear()
        extra_v = "proxy_protocol = true\nconnect = true" if variant == "accept_proxy" else "connect = true"
        extra_p = 'send_proxy = "v1"'
        p = start_switch(binary, rules(port, [be.port], extra_switch='header_timeout = "2s"\nkeepalive_timeout = "2s"\nmax_clients = 3', extra_virtual=extra_v, extra_pool=extra_p), port)
        try:
            pre = b"PROXY TCP4 10.9.8.7 10.0.0.1 5555 80\r\n" if variant == "accept_proxy" else b""
            r = [("keepalive 2 reqs", talk(port, [pre + G(b"/a"), 0.3, G(b"/b")], 1.0))]
            r.append(("CONNECT refused then GET", talk(port, [pre + b"CONNECT x:1 HTTP/1.1\r\nHost: x:1\r\n\r\n", 0.3, G(b"/c")], 1.0)))
            if variant == "accept_proxy":
                r.append(("bad proxy header", talk(port, [b"PROXY TCP4 garbage\r\n" + G(b"/d")], 1.0)))
                r.append(("proxy v1 UNKNOWN", talk(port, [b"PROXY UNKNOWN\r\n" + G(b"/e")], 1.0)))
                r.append(("proxy header split", talk(port, [b"PROXY TCP4 10.9.8.7 10.0", 0.3, b".0.1 5555 80\r\n" + G(b"/f")], 1.0)))
            else:
                r.append(("header timeout (partial head)", talk(port, [b"GET / HTTP/1.1\r\nHost: t\r\n"], 3.5)))
                r.append(("keepalive timeout", talk(port, [G(b"/g")], 3.5)))
                # max_clients = 3: hold 3, the 4th
                holders = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
                for hh in holders: hh.sendall(G(b"/slow"))
                time.sleep(0.3)
                r.append(("4th client over max_clients", talk(port, [G(b"/h")], 1.5)))
                for hh in holders: hh.close()
            time.sleep(0.3)
            out.append((variant, [(k, v) for k, v in r], list(be.log)))
        finally:
            p.terminate(); p.wait()
    return out

if __name__ == "__main__":
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k]))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for o, n in zip(res["old"], res["new"]):
        print("====", o[0])
        for (k, vo), (_, vn) in zip(o[1], n[1]):
            vo = re.sub(rb"127\.0\.0\.1 (\d+)", b"127.0.0.1 P", vo); vn = re.sub(rb"127\.0\.0\.1 (\d+)", b"127.0.0.1 P", vn)
            print(f"### {k}: {'SAME' if vo == vn else 'DIFF'}")
            print("  old:", vo[:400]); print("  new:", vn[:400]) if vo != vn else None
        lo = re.sub(r"\d{5}", "P", repr(o[2])); ln = re.sub(r"\d{5}", "P", repr(n[2]))
        print(f"### backend log: {'SAME' if lo == ln else 'DIFF'}\n  old: {lo}\n  new: {ln}")
