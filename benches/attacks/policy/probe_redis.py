"""Two tcpvs instances sharing a limit through one redis-server: share at 2x and 10x
overload, Redis SIGSTOP (do requests wait?), killed and restarted, then a fake Redis."""
import sys, os, socket, time, threading
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

RATE = 50
BURST = 10
be = Backend()
redis = Redis()
ports = [free_port(), free_port()]

def cfg(p, url):
    return limited_site(p, f'''key = "header"
header = "X-K"
rate = "{RATE}/s"
burst = {BURST}
store = "{url}"''', pool_cfg("www", be.port), workers=2)

inst = [Tcpvs(cfg(p, redis.url()), wait_port=p) for p in ports]
def up():
    return [i.stats()["limits"]["api"]["store_up"] for i in inst]
for _ in range(50):
    if all(up()): break
    time.sleep(0.1)
print("store_up:", up())

def drive(key, total_rps, seconds):
    """Sends total_rps requests a second of key `key`, half to each instance, paced; returns
    (admitted per instance, statuses, worst latency in ms)."""
    res = [dict(), dict()]
    worst = [0.0, 0.0]
    def worker(k):
        s = socket.create_connection(("127.0.0.1", ports[k])); rd = Reader(s)
        per = total_rps / 2
        start = time.time(); n = 0
        while True:
            due = start + n / per
            now = time.time()
            if due - start >= seconds: break
            if due > now: time.sleep(due - now)
            t0 = time.time()
            s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nX-K: " + key + b"\r\n\r\n")
            st = rd.response(5)[0]
            worst[k] = max(worst[k], (time.time() - t0) * 1000)
            res[k][st] = res[k].get(st, 0) + 1
            if st is None:
                s = socket.create_connection(("127.0.0.1", ports[k])); rd = Reader(s)
            n += 1
    th = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    [x.start() for x in th]; [x.join() for x in th]
    return [r.get(200, 0) for r in res], res, worst

for mult, key in ((2, b"k2x"), (10, b"k10x")):
    secs = 5
    adm, res, worst = drive(key, RATE * mult, secs)
    exp = BURST + RATE * secs
    print(f"{mult}x overload for {secs}s: admitted {adm} total {sum(adm)}, expected ~{exp} "
          f"({(sum(adm)-exp)/exp*100:+.1f}%); statuses {res}; worst latency ms {[round(w,1) for w in worst]}")

# SIGSTOP: do requests wait on Redis?
redis.stop_sig(True)
adm, res, worst = drive(b"kstop", RATE * 4, 3)
print(f"redis SIGSTOPped, 4x for 3s: admitted {adm} (per-instance fail-open expect ~{BURST+RATE*3} each at most), worst latency ms {[round(w,1) for w in worst]}, store_up {up()}")
redis.stop_sig(False)
time.sleep(2)
print("after SIGCONT store_up:", up())
adm, res, worst = drive(b"kcont", RATE * 4, 3)
print(f"after SIGCONT 4x 3s: total {sum(adm)} expect ~{BURST+RATE*3}")

# kill and restart
redis.kill()
time.sleep(1.5)
adm, res, worst = drive(b"kdead", RATE * 4, 3)
print(f"redis dead 4x 3s: admitted {adm}, worst latency ms {[round(w,1) for w in worst]}, store_up {up()}")
redis.start()
for _ in range(40):
    if all(up()): break
    time.sleep(0.1)
print("restarted: store_up", up())
adm, res, worst = drive(b"kdead", RATE * 4, 3)
print(f"after restart same key 4x 3s: total {sum(adm)} expect ~{RATE*3} (no free burst)")
warn = [l for l in inst[0].log().split(b"\n") if b"store" in l]
print("log lines about store (instance 0):", len(warn), [l[-160:] for l in warn])
for i in inst: i.stop()
redis.kill()
