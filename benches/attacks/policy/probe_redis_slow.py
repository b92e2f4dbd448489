"""Two instances sharing a limit through a Redis reached over a proxy that delays every
reply by DELAY_MS (under the 50 ms outage threshold): does the shared limit still hold
within 10 % at 10x?"""
import sys, os, subprocess, re, time, socket, threading
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

DELAY = float(os.environ.get("DELAY_MS", "30")) / 1000
RATE = 500; BURST = 50; SECS = 6
be = Backend(); redis = Redis()
pport = free_port()
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("127.0.0.1", pport)); ls.listen(16)
def pipe(a, b, delay):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            if delay: time.sleep(delay)
            b.sendall(d)
    except OSError:
        pass
    finally:
        a.close(); b.close()
def accept():
    while True:
        try:
            c, _ = ls.accept()
        except OSError:
            return
        r = socket.create_connection(("127.0.0.1", redis.port))
        threading.Thread(target=pipe, args=(c, r, 0), daemon=True).start()
        threading.Thread(target=pipe, args=(r, c, DELAY), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
ports = [free_port(), free_port()]
inst = [Tcpvs(limited_site(p, f'''key = "header"
header = "X-K"
rate = "{RATE}/s"
burst = {BURST}
store = "redis://127.0.0.1:{pport}/0"''', pool_cfg("www", be.port), workers=1), wait_port=p) for p in ports]
time.sleep(1)
print("store_up:", [i.stats()["limits"]["api"]["store_up"] for i in inst])
for mult in (2, 10):
    per_instance = RATE * mult // 2
    procs = [subprocess.Popen(["h2load", "-D", str(SECS), "-c", "10", "-m", "1", f"--rps={per_instance // 10}",
                               "-H", f"x-k: k{mult}", f"http://127.0.0.1:{p}/"], stdout=subprocess.PIPE, text=True) for p in ports]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    codes = [re.search(r"status codes: (\d+) 2xx, \d+ 3xx, (\d+) 4xx", o).groups() for o in outs]
    adm = sum(int(c[0]) for c in codes); exp = BURST + RATE * SECS
    print(f"reply delay {DELAY*1000:.0f} ms, {mult}x: admitted {adm} {[int(c[0]) for c in codes]}, expected ~{exp}: {(adm-exp)/exp*100:+.1f}%; store_up {[i.stats()['limits']['api']['store_up'] for i in inst]}, outages in log {[i.log().count(b'unreachable') for i in inst]}")
print([l[-230:] for l in inst[0].log().split(b"\n") if b"store" in l])
for i in inst: i.stop()
redis.kill(); ls.close()
