"""/stats, /metrics and the access log for a limit: dry_run and enforcing, over HTTP/1
pipelining and HTTP/2 streams."""
import sys, os, socket, subprocess, re
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

be = Backend()
port = free_port()
def cfg(dry):
    return f'''
[switch]
workers = 2
access_log_format = "json"
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"
[[virtual.web.rule]]
path = "^/lim"
pool = "www"
limit = "l"
[limit.l]
key = "source"
rate = "1/m"
burst = 5
dry_run = {dry}
{pool_cfg("www", be.port)}
'''
for dry in ("true", "false"):
    t = Tcpvs(cfg(dry), wait_port=port)
    s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"GET /lim HTTP/1.1\r\nHost: h\r\n\r\n" * 10)
    rd = Reader(s); sts = [rd.response()[0] for _ in range(10)]; s.close()
    out = subprocess.run(["h2load", "-n", "10", "-c", "1", "-m", "10", f"http://127.0.0.1:{port}/lim"], capture_output=True, text=True).stdout
    h2 = [l for l in out.split("\n") if "status codes" in l]
    sts += [None]
    import time; time.sleep(0.3)
    lim = t.stats()["limits"]["l"]
    met = [l for l in t.metrics().split("\n") if l.startswith("tcpvs_limit")]
    log = [l for l in t.log().decode(errors="replace").split("\n") if '"target"' in l]
    with_limit = [l for l in log if '"limit"' in l]
    svc = t.stats()["services"][0]
    print(f"dry_run={dry}: h1 {sts[:-1]}, h2 {h2}; /stats {lim}; metrics {met}; log lines {len(log)}, with \"limit\" {len(with_limit)}; service 4xx {svc['responses']['4xx']}")
    if with_limit: print("   ", with_limit[-1][:300])
    t.stop()
