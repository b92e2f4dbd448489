"""Two instances sharing one limit through Redis, driven by h2load at 2x and 10x the rate (one
key for every request): admitted vs burst + rate x time."""
import sys, os, subprocess, re, time
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

RATE = int(os.environ.get("RATE", "500")); BURST = int(os.environ.get("BURST", "50")); SECS = 6
be = Backend()
redis = Redis()
ports = [free_port(), free_port()]
inst = [Tcpvs(limited_site(p, f'''key = "header"
header = "X-K"
rate = "{RATE}/s"
burst = {BURST}
store = "{redis.url()}"''', pool_cfg("www", be.port), workers=1), wait_port=p) for p in ports]
time.sleep(0.5)
for mult in (2, 10):
    key = f"key{mult}x"
    per_instance = RATE * mult // 2
    clients = 10
    procs = [subprocess.Popen(["h2load", "-D", str(SECS), "-c", str(clients), "-m", "1", f"--rps={per_instance // clients}",
                               "-H", f"x-k: {key}", f"http://127.0.0.1:{p}/"], stdout=subprocess.PIPE, text=True) for p in ports]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    codes = [re.search(r"status codes: (\d+) 2xx, \d+ 3xx, (\d+) 4xx", o).groups() for o in outs]
    adm = sum(int(c[0]) for c in codes); sent = sum(int(c[0]) + int(c[1]) for c in codes)
    exp = BURST + RATE * SECS
    print(f"{mult}x: sent {sent} ({sent/SECS:.0f}/s), admitted {adm} per instance {[int(c[0]) for c in codes]}, expected ~{exp}: {(adm-exp)/exp*100:+.1f}%")
for i in inst: i.stop()
redis.kill()
