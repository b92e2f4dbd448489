#!/usr/bin/env python3
"""HTTP/1 front-end probes, old vs new. Usage: http_probes.py [probe-name-substring]"""
import re, socket, sys, time, threading
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *


def echo_until_close(c, prefix, bye):
    """A tunnel's far end: echoes each read with `prefix` until the client half-closes, then `bye`."""
    c.settimeout(3)
    try:
        while True:
            d = c.recv(65536)
            if not d: break
            c.sendall(prefix + d)
        c.sendall(bye)
    except OSError: pass

def handler(be, c, n):
    buf = b""
    while True:
        head, rest = read_head(c, buf)
        if head is None:
            be.log.append((n, "eof", buf)); return
        path = head.split(b" ")[1]
        meth = head.split(b" ")[0]
        if path == b"/early":            # answers before reading the body, keeps connection
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly")
            time.sleep(0.3)
            try:
                c.settimeout(1.0); extra = c.recv(65536)
            except Exception: extra = b"<none>"
            be.log.append((n, "early-then", head.split(b"\r\n")[0], extra)); return
        if path == b"/reject":   # final answer to Expect without reading the body
            c.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\n\r\nnope"); buf = rest; continue
        if path == b"/nocontinue":   # ignores Expect, waits for body
            body, buf = read_body(c, head, rest)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)); continue
        if path == b"/upgrade-refused":
            body, buf = read_body(c, head, rest)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno"); continue
        if path == b"/bigresp":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (1<<20) + b"z" * (1<<20)); buf = rest; continue
        if path == b"/bigchunked":
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"10000\r\n" + b"q"*65536 + b"\r\n")*16 + b"0\r\nX-End: 1\r\n\r\n"); buf = rest; continue
        if path == b"/continue":
            if b"100-continue" in head.lower():
                c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            body, buf = read_body(c, head, rest)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)); continue
        body, buf = read_body(c, head, rest)
        be.log.append((n, head.split(b"\r\n")[0], body))
        if path == b"/head":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + (b"" if meth == b"HEAD" else b"x"*100)); continue
        if path == b"/headchunked":
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"" if meth == b"HEAD" else b"3\r\nabc\r\n0\r\n\r\n")); continue
        if path == b"/204":
            c.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"); continue
        if path == b"/204bad":   # 204 with a CL and body bytes (server bug)
            c.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"); continue
        if path == b"/304":
            c.sendall(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\nETag: x\r\n\r\n"); continue
        if path == b"/trailer":
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\nSet-Cookie: bad\r\nX-U: 2\r\n\r\n"); continue
        if path == b"/chunkext":
            c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\n\r\n"); continue
        if path == b"/close":   # body delimited by close
            c.sendall(b"HTTP/1.1 200 OK\r\n\r\nuntil-close"); return
        if path == b"/http10te":
            c.sendall(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"); return
        if path == b"/conclose":
            c.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"); continue
        if path == b"/103":
            c.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); continue
        if path == b"/big":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (8<<20))
            try:
                for _ in range(128): c.sendall(b"y" * 65536)
            except OSError as e: be.log.append((n, "big-abort", repr(e)))
            continue
        if path == b"/shortcl":  # server promises 10, sends 3, closes
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"); return
        if path == b"/dupcl":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc"); continue
        if path == b"/clte":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"); continue
        if path == b"/garbage":
            c.sendall(b"NOT HTTP\r\n\r\n"); return
        if path == b"/noresp":
            return
        if path == b"/ws":
            c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            echo_until_close(c, b"ws-echo:", b"bye-after-halfclose")
            return
        if meth == b"CONNECT":
            c.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            echo_until_close(c, b"tun:", b"bye")
            return
        resp = head.split(b"\r\n")[0] + b"|" + body
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(resp), resp))

G = lambda p, extra=b"": b"GET " + p + b" HTTP/1.1\r\nHost: t\r\n" + extra + b"\r\n"
PROBES = {
 "pipeline3": [G(b"/a") + G(b"/b") + G(b"/c")],
 "pipeline-after-cl-body": [b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello" + G(b"/after")],
 "pipeline-after-chunked-body": [b"POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Tr: v\r\nCookie: c\r\n\r\n" + G(b"/after")],
 "chunked-split": [b"POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe", 0.3, b"llo\r\n0\r", 0.3, b"\n\r\n" + G(b"/after")],
 "head-cl": [b"HEAD /head HTTP/1.1\r\nHost: t\r\n\r\n" + G(b"/after")],
 "head-chunked": [b"HEAD /headchunked HTTP/1.1\r\nHost: t\r\n\r\n" + G(b"/after")],
 "204": [G(b"/204") + G(b"/after")],
 "204bad": [G(b"/204bad"), 0.5, G(b"/after")],
 "304": [G(b"/304") + G(b"/after")],
 "trailer-resp": [G(b"/trailer") + G(b"/after")],
 "trailer-resp-http10": [b"GET /trailer HTTP/1.0\r\n\r\n"],
 "chunkext-resp": [G(b"/chunkext")],
 "close-delimited": [G(b"/close")],
 "close-delimited-then-more": [G(b"/close") + G(b"/after")],
 "http10-te": [G(b"/http10te")],
 "server-conclose": [G(b"/conclose") + G(b"/after")],
 "103": [G(b"/103") + G(b"/after")],
 "103-http10-client": [b"GET /103 HTTP/1.0\r\n\r\n"],
 "continue": [b"POST /continue HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", 0.5, b"hello" + G(b"/after")],
 "continue-http10": [b"POST /continue HTTP/1.0\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", 0.5, b"hello"],
 "early-answer": [b"POST /early HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhello", 0.5, b"world" + G(b"/after")],
 "early-answer-chunked": [b"POST /early HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", 0.5, b"5\r\nworld\r\n0\r\n\r\n" + G(b"/after")],
 "shortcl": [G(b"/shortcl")],
 "dupcl": [G(b"/dupcl") + G(b"/after")],
 "clte-resp": [G(b"/clte") + G(b"/after")],
 "garbage": [G(b"/garbage") + G(b"/after")],
 "noresp": [G(b"/noresp") + G(b"/after")],
 "noresp-post": [b"POST /noresp HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx" + G(b"/after")],
 "ws": [b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n", 0.5, b"ping", 0.5],
 "ws-halfclose": ("shut", [b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 0.5, b"ping", 0.5]),
 "ws-pipelined-after": [b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nEARLYDATA", 0.5],
 "h2c-upgrade": [b"GET /x HTTP/1.1\r\nHost: t\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAA\r\n\r\n"],
 "connect": [b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", 0.5, b"inner", 0.5],
 "connect-pipelined": [b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\nEARLY", 0.5],
 "connect-halfclose": ("shut", [b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n", 0.5, b"inner", 0.3]),
 "http10-ka": [b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 0.5, b"GET /b HTTP/1.0\r\n\r\n"],
 "client-conclose": [G(b"/a", b"Connection: close\r\n") + G(b"/b")],
 "te+cl": [b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"],
 "absolute": [b"GET http://other.example:81/z?q=1 HTTP/1.1\r\nHost: t\r\n\r\n"],
 "bad-chunk": [b"POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"],
 "options-star": [b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n"],
 "http09": [b"GET /\r\n\r\n"],
 "version2": [b"GET / HTTP/2.0\r\nHost: t\r\n\r\n"],
 "big-client-close-then-new": ("bigclose", None),
 "expect-rejected-no-body": [b"POST /reject HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", 0.5, G(b"/after")],
 "expect-rejected-body-sent": [b"POST /reject HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", 0.5, b"hello" + G(b"/after")],
 "expect-no-100-from-server": [b"POST /nocontinue HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", 1.0, b"hello" + G(b"/after")],
 "expect-chunked": [b"POST /continue HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", 0.5, b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n" + G(b"/after")],
 "upgrade-refused-then-more": [b"GET /upgrade-refused HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + G(b"/after")],
 "big-upload-pipelined": [b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 1048576\r\n\r\n" + b"u"*1048576 + G(b"/after")],
 "big-resp-pipelined": [G(b"/bigresp") + G(b"/after")],
 "big-chunked-resp-pipelined": [G(b"/bigchunked") + G(b"/after")],
 "big-chunked-upload": [b"POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"10000\r\n" + b"q"*65536 + b"\r\n")*4 + b"0\r\nX-A: b\r\n\r\n" + G(b"/after")],
 "abort-upload-then-new": ("abortupload", None),
 "http10-chunked-post": [b"POST /p HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"],
 "head-then-pipelined-get-bigresp": [b"HEAD /bigresp HTTP/1.1\r\nHost: t\r\n\r\n" + G(b"/after")],
 "trailer-forbidden-fields-req": [b"POST /p HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nContent-Length: 5\r\nHost: evil\r\nX-Forwarded-For: 1.2.3.4\r\nTransfer-Encoding: chunked\r\nX-Ok: 1\r\n\r\n" + G(b"/after")],
}

def norm(b):
    b = re.sub(rb"127\.0\.0\.1:\d+", b"127.0.0.1:P", b)
    return b

def run(binary, names, connect=True):
    be = Backend(handler)
    port = free_port()
    p = start_switch(binary, rules(port, [be.port], extra_virtual="connect = true" if connect else ""), port)
    out = {}
    try:
        for name in names:
            be.log.clear()
            spec = PROBES[name]
            if isinstance(spec, tuple) and spec[0] == "bigclose":
                c = socket.create_connection(("127.0.0.1", port)); c.sendall(G(b"/big")); c.recv(1000); c.close()
                time.sleep(1.0)
                got = talk(port, [G(b"/after")], 2.0)
            elif isinstance(spec, tuple) and spec[0] == "abortupload":
                c = socket.create_connection(("127.0.0.1", port)); c.sendall(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"); time.sleep(0.5); c.close()
                time.sleep(0.5)
                got = talk(port, [G(b"/after")], 2.0)
            elif isinstance(spec, tuple):
                got = talk(port, spec[1], 2.5, shut=True)
            else:
                got = talk(port, spec, 2.5)
            time.sleep(0.2)
            out[name] = (norm(got), [tuple(norm(x) if isinstance(x, bytes) else x for x in l) for l in be.log])
    finally:
        p.terminate(); p.wait()
    return out

if __name__ == "__main__":
    sel = [n for n in PROBES if len(sys.argv) < 2 or any(a in n for a in sys.argv[1:])]
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k], sel))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for n in sel:
        o, nw = res["old"][n], res["new"][n]
        same = "SAME" if o[0] == nw[0] else "DIFF"
        sameb = "same-backend" if o[1] == nw[1] else "DIFF-backend"
        print(f"### {n}: {same} {sameb}")
        if same == "DIFF" or sameb != "same-backend" or "-v" in sys.argv:
            print("  old:", o[0][:600]); print("  new:", nw[0][:600])
            print("  old backend:", o[1][:6]); print("  new backend:", nw[1][:6])
        else:
            print("  both:", o[0][:300] if len(o[0]) < 3000 else (len(o[0]), o[0][:120], o[0][-200:]), "| backend:", [tuple(x[:80] if isinstance(x, bytes) else x for x in l) for l in o[1]][:4])
