"""What a store can do to the instances: (a) a shared tat one hour ahead (what an instance whose
clock runs an hour fast writes) locks the key on every instance, and stays after Redis forgets
it; (b) a Redis that accepts connections but refuses the script (a read-only replica after a
failover, a password missing): log and /stats."""
import sys, os, socket, time, subprocess
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

be = Backend()
redis = Redis()
port = free_port()
def cfg(url):
    return limited_site(port, f'''key = "header"
header = "X-K"
rate = "100/s"
burst = 20
store = "{url}"''', pool_cfg("www", be.port))
t = Tcpvs(cfg(redis.url()), wait_port=port)
time.sleep(0.5)
R = lambda k: one(port, b"GET / HTTP/1.1\r\nHost: h\r\nX-K: " + k + b"\r\nConnection: close\r\n\r\n")
def rcli(*a):
    return subprocess.run(["redis-cli", "-p", str(redis.port)] + list(a), capture_output=True, text=True).stdout.strip()
print("victim first request:", R(b"victim")[0])
ahead = int((time.time() + 3600) * 1e6)
print("SET as an instance one hour fast would:", rcli("SET", "tcpvs:limit:api:victim", str(ahead), "PX", "3700000"))
time.sleep(0.2)
r = R(b"victim"); time.sleep(0.1); r = R(b"victim")
print("victim now:", r[0], [l for l in r[1].split(b"\r\n") if l.startswith(b"Retry-After")])
print("Redis forgets it (DEL):", rcli("DEL", "tcpvs:limit:api:victim"))
time.sleep(0.3)
r = R(b"victim")
print("victim after DEL:", r[0], [l for l in r[1].split(b"\r\n") if l.startswith(b"Retry-After")])
t.stop()

# read-only replica
replica = Redis()
subprocess.run(["redis-cli", "-p", str(replica.port), "REPLICAOF", "127.0.0.1", str(redis.port)], capture_output=True)
time.sleep(1)
print("replica role:", subprocess.run(["redis-cli", "-p", str(replica.port), "ROLE"], capture_output=True, text=True).stdout.split()[0])
t = Tcpvs(cfg(replica.url()), wait_port=port)
ups = []
for i in range(50):
    R(b"k%d" % (i % 3))
    if i % 10 == 0: ups.append(t.stats()["limits"]["api"]["store_up"])
    time.sleep(0.1)
log = t.log().split(b"\n")
w = [l for l in log if b"WARN" in l and b"store" in l]
print(f"read-only replica, 5 s: WARN lines {len(w)}, INFO 'is back' lines {sum(b'is back' in l for l in log)}, store_up samples {ups}")
print("  first warn:", w[0][-200:] if w else None)
t.stop(); replica.kill(); redis.kill()
