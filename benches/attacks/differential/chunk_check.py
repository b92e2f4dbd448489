import sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_probes as hp
from harness import BINS
def dechunk(b):
    out = b""; sizes = []
    while True:
        line, _, b = b.partition(b"\r\n"); n = int(line.split(b";")[0], 16); sizes.append(n)
        if n == 0: return out, sizes, b
        out += b[:n]; b = b[n+2:]
for k in BINS:
    for i in range(2):
        r = hp.run(BINS[k], ["big-chunked-upload"])["big-chunked-upload"]
        body = r[1][0][2]
        data, sizes, trailer = dechunk(body)
        print(k, len(data), data == b"q"*65536*4, len(sizes), sizes[:6], trailer, [l[1] for l in r[1]], r[0][-40:])
