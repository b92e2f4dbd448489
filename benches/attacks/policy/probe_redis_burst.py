"""A fresh key's burst sent at once to both instances sharing a store: each admits a burst."""
import sys, os, socket, threading, time
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *
be = Backend(); redis = Redis(); ports = [free_port(), free_port()]
inst = [Tcpvs(limited_site(p, f'''key = "header"
header = "X-K"
rate = "1/m"
burst = 50
store = "{redis.url()}"''', pool_cfg("www", be.port)), wait_port=p) for p in ports]
time.sleep(0.5)
res = [0, 0]
def go(k):
    s = socket.create_connection(("127.0.0.1", ports[k])); s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nX-K: fresh\r\n\r\n" * 100)
    rd = Reader(s); res[k] = sum(rd.response()[0] == 200 for _ in range(100)); s.close()
th = [threading.Thread(target=go, args=(k,)) for k in (0, 1)]; [x.start() for x in th]; [x.join() for x in th]
print("burst 50, 100 pipelined to each of 2 instances at once: admitted", res, "total", sum(res))
time.sleep(0.5)
print("after exchange, one more each:", [one(p, b"GET / HTTP/1.1\r\nHost: h\r\nX-K: fresh\r\nConnection: close\r\n\r\n")[0] for p in ports])
for i in inst: i.stop()
redis.kill()
