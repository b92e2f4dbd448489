"""tcpvs against a fake Redis (fake_redis.py MODE): does it crash, grow, lock keys out?"""
import sys, os, socket, time, subprocess
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

be = Backend()
for mode in sys.argv[1:] or ["huge", "bigarray", "bulkbomb", "garbage", "short", "error"]:
    rport = free_port(); port = free_port()
    fake = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_redis.py"), str(rport), mode, "15"])
    import lib26; lib26._procs.append(fake)
    wait_listen(rport)
    t = Tcpvs(limited_site(port, f'''key = "source"
rate = "100/s"
burst = 20
store = "redis://127.0.0.1:{rport}/0"''', pool_cfg("www", be.port), workers=2), wait_port=port)
    rss0 = t.rss_kib()
    got = {}
    peak = rss0
    for round_ in range(30):
        r = one(port, b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        got[r[0]] = got.get(r[0], 0) + 1
        time.sleep(0.1)
        if t.proc.poll() is not None: break
        peak = max(peak, t.rss_kib())
    alive = t.proc.poll() is None
    lim = t.stats()["limits"]["api"] if alive else None
    r = one(port, b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n") if alive else None
    print(f"{mode}: alive={alive} rc={t.proc.poll()} statuses over 3s at 10/s (limit 100/s) {got}; RSS {rss0}->{peak} KiB; limits {lim}")
    if not alive:
        print("   log tail:", t.log()[-600:])
    t.stop(); fake.kill(); fake.wait()
