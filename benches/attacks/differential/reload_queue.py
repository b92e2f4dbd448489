#!/usr/bin/env python3
"""Reload while a request waits in a pool's queue; reload keeping a down server down. Old vs new.
Usage: reload_queue.py"""
import json, os, signal, socket, sys, time, threading, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *
from reload_probes import h_slow, admin_req, summary, get

def text(port, admin, be, qt, maxc=1, dead=None, extra_pool=""):
    dead_s = f', {{ addr = "127.0.0.1:{dead}" }}' if dead else ""
    return f"""[switch]
idle_timeout = "8s"
workers = 1
access_log = false
[admin]
listen = "127.0.0.1:{admin}"
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "app"
[pool.app]
queue_timeout = "{qt}"
servers = [{{ addr = "127.0.0.1:{be.port}", max_conns = {maxc} }}{dead_s}]
{extra_pool}"""

def queue(binary):
    be = Backend(h_slow); port, admin = free_port(), free_port()
    p = start_switch(binary, text(port, admin, be, "6s"), port)
    out = []
    try:
        time.sleep(0.3)
        res = {}
        def req(k, path):
            t0 = time.time(); s = get(port, path)[0]; res[k] = (s, round(time.time() - t0, 1))
        t1 = threading.Thread(target=req, args=("holder", b"/slow")); t1.start(); time.sleep(0.3)
        t2 = threading.Thread(target=req, args=("queued", b"/x")); t2.start(); time.sleep(0.3)
        q = summary(admin)
        open(p.rules, "w").write(text(port, admin, be, "7s"))  # pool changes: rebuilt
        os.kill(p.pid, signal.SIGHUP); time.sleep(0.2)
        t3 = threading.Thread(target=req, args=("after-reload", b"/x")); t3.start()
        for t in (t1, t2, t3): t.join()
        out += [("while queued", q), ("results (status, seconds)", res), ("after", summary(admin))]
        # reload that changes the server's max_conns while one holds it and one waits
        res.clear()
        t1 = threading.Thread(target=req, args=("holder", b"/slow")); t1.start(); time.sleep(0.3)
        t2 = threading.Thread(target=req, args=("queued", b"/x")); t2.start(); time.sleep(0.3)
        open(p.rules, "w").write(text(port, admin, be, "7s", maxc=2))
        os.kill(p.pid, signal.SIGHUP)
        for t in (t1, t2): t.join()
        out += [("max_conns 1->2 during queue: results", res), ("after2", summary(admin))]
    finally:
        p.terminate(); p.wait()
    return out

def down_kept(binary):
    be = Backend(h_slow); port, admin = free_port(), free_port(); dead = free_port()
    extra = '[pool.app.health]\nmax_fails = 1\nfail_timeout = "60s"\n'
    p = start_switch(binary, text(port, admin, be, "0s", maxc=0, dead=dead, extra_pool=extra), port)
    out = []
    try:
        time.sleep(0.3)
        for _ in range(4): get(port)
        before = summary(admin)
        open(p.rules, "w").write(text(port, admin, be, "1s", maxc=0, dead=dead, extra_pool=extra))
        os.kill(p.pid, signal.SIGHUP); time.sleep(0.4)
        after = summary(admin)
        r = collections.Counter(get(port)[0] for _ in range(6))
        out += [("before", before), ("after pool-changing reload", after), ("6 GETs", dict(r)), ("final", summary(admin))]
    finally:
        p.terminate(); p.wait()
    return out

if __name__ == "__main__":
    for f in (queue, down_kept):
        res = {}
        th = [threading.Thread(target=lambda k=k: res.__setitem__(k, f(BINS[k]))) for k in BINS]
        for t in th: t.start()
        for t in th: t.join()
        for (k1, o), (k2, n) in zip(res["old"], res["new"]):
            print(f"### {f.__name__} / {k1}")
            print("  old:", o); print("  new:", n)
