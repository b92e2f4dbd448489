"""A Redis that accepts connections but fails every EVALSHA (here: -ERR): how often does tcpvs
warn, and what does /stats say? Also the Retry-After after a far-future shared tat."""
import sys, os, socket, time, subprocess
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *
import lib26
be = Backend()
for mode in ["error", "huge"]:
    rport = free_port(); port = free_port()
    fake = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_redis.py"), str(rport), mode, "15"])
    lib26._procs.append(fake); wait_listen(rport)
    t = Tcpvs(limited_site(port, f'''key = "source"
rate = "100/s"
burst = 20
store = "redis://127.0.0.1:{rport}/0"''', pool_cfg("www", be.port)), wait_port=port)
    ups = []
    last = None
    for i in range(60):
        last = one(port, b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        if i % 10 == 0: ups.append(t.stats()["limits"]["api"]["store_up"])
        time.sleep(0.1)
    log = t.log().split(b"\n")
    print(f"{mode}: 6 s of 10 req/s: WARN lines {sum(b'WARN' in l and b'store' in l for l in log)}, 'is back' lines {sum(b'is back' in l for l in log)}, store_up samples {ups}")
    print("   last response head:", last[1])
    t.stop(); fake.kill(); fake.wait()
