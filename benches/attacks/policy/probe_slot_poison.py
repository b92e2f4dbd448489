"""max_keys overflow slots poisoned: an attacker with many addresses (an IPv6 /64, here
127.1.0.0/16) drains one bucket per address until the table overflows; afterwards clients never
seen before share a slot with a drained key and are refused (429) on their first request."""
import sys, os, socket, time
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

port = free_port()
dead = free_port()
RATE = os.environ.get("RATE", "6/m")
BURST = int(os.environ.get("BURST", "3"))
MAXK = int(os.environ.get("MAX_KEYS", "1000"))
ATTACKERS = int(os.environ.get("ATTACKERS", "13000"))
t = Tcpvs(limited_site(port, f'''key = "source"
rate = "{RATE}"
burst = {BURST}
max_keys = {MAXK}''', f'[pool.www]\nservers = [{{ addr = "127.0.0.1:{dead}" }}]', workers=2), wait_port=port)

REQ = b"GET /api HTTP/1.1\r\nHost: h\r\n\r\n"

def from_addr(addr, n):
    s = socket.socket(); s.bind((addr, 0)); s.settimeout(10); s.connect(("127.0.0.1", port))
    s.sendall(REQ * n)
    rd = Reader(s)
    out = [rd.response(10)[0] for _ in range(n)]
    s.close()
    return out

def fresh_clients(tag, count=200):
    got = [from_addr(f"127.2.{tag}.{i+1}", 1)[0] for i in range(count)]
    return {s: got.count(s) for s in set(got)}

print("before: 200 never-seen clients, one request each:", fresh_clients(0))
t0 = time.time()
for i in range(ATTACKERS):
    from_addr(f"127.1.{i // 250}.{i % 250 + 1}", BURST)
print(f"attacker: {ATTACKERS} addresses x {BURST} requests in {time.time()-t0:.0f}s; limits {t.stats()['limits']['api']}")
print("after: 200 never-seen clients, one request each:", fresh_clients(1))
time.sleep(5)
print("5 s later:", fresh_clients(2))
t.stop()
