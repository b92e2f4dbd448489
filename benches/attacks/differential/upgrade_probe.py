#!/usr/bin/env python3
"""Binary upgrade (--take-over) with the same binary, clients running; old vs new. Usage: upgrade_probe.py"""
import json, os, re, signal, socket, subprocess, sys, time, threading, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *
from reload_probes import h_slow, admin_req, get

def run(binary):
    be = Backend(h_slow); port, admin = free_port(), free_port()
    folder = tempfile.mkdtemp(dir=TMP); sock = os.path.join(folder, "up.sock")
    rules_path = os.path.join(folder, "r.toml")
    open(rules_path, "w").write(f"""[switch]
workers = 2
access_log = false
shutdown_timeout = "3s"
[admin]
listen = "127.0.0.1:{admin}"
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "app"
[pool.app]
servers = [{{ addr = "127.0.0.1:{be.port}" }}]
""")
    err1 = open(os.path.join(folder, "e1"), "w"); err2 = open(os.path.join(folder, "e2"), "w")
    p1 = subprocess.Popen([binary, "run", "-c", rules_path, "--upgrade-socket", sock], stderr=err1)
    for _ in range(100):
        try: socket.create_connection(("127.0.0.1", port), 0.1).close(); break
        except OSError: time.sleep(0.05)
    stat = collections.Counter(); stop = time.time() + 6
    def client():
        while time.time() < stop:
            stat[get(port)[0]] += 1
    th = [threading.Thread(target=client) for _ in range(3)]
    for t in th: t.start()
    time.sleep(1)
    # a request in flight across the upgrade
    slow = {}
    ts = threading.Thread(target=lambda: slow.__setitem__("r", get(port, b"/slow")[0])); ts.start(); time.sleep(0.2)
    p2 = subprocess.Popen([binary, "run", "-c", rules_path, "--upgrade-socket", sock, "--take-over", sock], stderr=err2)
    time.sleep(2)
    for t in th: t.join()
    ts.join()
    out = [("client statuses during upgrade", dict(stat)), ("slow request across upgrade", slow.get("r"))]
    try: p1.wait(timeout=6); out.append(("old process exited", p1.returncode))
    except subprocess.TimeoutExpired: out.append(("old process exited", "STILL RUNNING")); p1.kill()
    d = admin_req(admin, "GET", "/stats")
    out.append(("admin after upgrade", d[0]))
    out.append(("reload in successor", admin_req(admin, "POST", "/reload", {})[0]))
    out.append(("GET after", get(port)[0]))
    p2.terminate(); p2.wait()
    return out

if __name__ == "__main__":
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k]))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for o, n in zip(res["old"], res["new"]):
        print(f"### {o[0]}: {'SAME' if o == n else 'DIFF'}\n  old: {o[1:]}\n  new: {n[1:]}")
