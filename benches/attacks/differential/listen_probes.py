#!/usr/bin/env python3
"""Listener handling at start and reload, workers = 2; old vs new. Usage: listen_probes.py"""
import json, os, re, signal, socket, subprocess, sys, time, threading, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *
from reload_probes import h_slow, admin_req, get

def text(admin, services, be, workers=2):
    s = f"""[switch]
workers = {workers}
access_log = false
[admin]
listen = "127.0.0.1:{admin}"
[pool.app]
servers = [{{ addr = "127.0.0.1:{be.port}" }}]
"""
    for name, port in services:
        s += f'[virtual.{name}]\nlisten = "127.0.0.1:{port}"\ndefault_pool = "app"\n'
    return s

def probe_port(port, n=20):
    ok = collections.Counter()
    for _ in range(n):
        st = get(port)[0]
        ok[st] += 1
    return dict(ok)

def run(binary):
    be = Backend(h_slow); admin = free_port()
    a, b, c = free_port(), free_port(), free_port()
    p = start_switch(binary, text(admin, [("a", a), ("c", c)], be), a)
    out = []
    try:
        time.sleep(0.3)
        hold = socket.socket(); hold.bind(("127.0.0.1", 0)); hold.listen(1); taken = hold.getsockname()[1]
        # two new services: b free, t taken; c removed -> refused whole
        open(p.rules, "w").write(text(admin, [("a", a), ("b", b), ("t", taken)], be))
        r = admin_req(admin, "POST", "/reload", {})
        out.append(("reload with b free, t taken, c removed", r[0]))
        out.append(("b after refused reload (should refuse)", probe_port(b, 5)))
        out.append(("c after refused reload (should serve)", probe_port(c, 10)))
        hold.close()
        # now a reload that uses b and removes c
        open(p.rules, "w").write(text(admin, [("a", a), ("b", b)], be))
        r = admin_req(admin, "POST", "/reload", {})
        out.append(("reload adding b, removing c", r[0], re.sub(r"\d{5}", "P", r[1])))
        out.append(("b after (workers=2, 20 conns)", probe_port(b, 20)))
        out.append(("c after removal (20 conns)", probe_port(c, 20)))
        # swap listen addresses between services a and b
        open(p.rules, "w").write(text(admin, [("a", b), ("b", a)], be))
        r = admin_req(admin, "POST", "/reload", {})
        out.append(("swap a<->b", r[0]))
        out.append(("a port", probe_port(a, 10)), )
        out.append(("b port", probe_port(b, 10)))
        d = json.loads(admin_req(admin, "GET", "/stats")[1])
        out.append(("services", re.sub(r"\d{5}", "P", repr([(s["name"], s["listen"]) for s in d["services"]]))))
        # rename service on same address
        open(p.rules, "w").write(text(admin, [("x", b), ("b", a)], be))
        r = admin_req(admin, "POST", "/reload", {})
        out.append(("rename a->x same address", r[0], probe_port(b, 10)))
    finally:
        p.terminate(); p.wait()
    # start on a taken address, workers = 2 and 1
    for w in (2, 1):
        hold = socket.socket(); hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1); hold.bind(("127.0.0.1", 0)); hold.listen(1); taken = hold.getsockname()[1]
        folder = TMP; path = os.path.join(folder, f"taken-{os.getpid()}-{w}-{binary[-6:]}.toml")
        open(path, "w").write(text(free_port(), [("a", taken)], be, workers=w))
        r = subprocess.run([binary, "run", "-c", path], capture_output=True, timeout=10)
        out.append((f"start on taken (SO_REUSEPORT holder) workers={w}", r.returncode, re.sub(r"\d{5}", "P", r.stderr.decode()[-200:])))
        hold.close()
    return out

if __name__ == "__main__":
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k]))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for o, n in zip(res["old"], res["new"]):
        so = re.sub(r"\d{5}", "P", repr(o)); sn = re.sub(r"\d{5}", "P", repr(n))
        print(f"### {'SAME' if so == sn else 'DIFF'}\n  old: {so}" + ("" if so == sn else f"\n  new: {sn}"))
