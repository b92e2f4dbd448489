#!/usr/bin/env python3
"""A server that answers a large upload before reading it (and never reads it); old vs new.
Usage: early_big.py"""
import re, socket, sys, time, threading
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *

def h(be, c, n):
    head, rest = read_head(c)
    if head is None: return
    path = head.split(b" ")[1]
    if path == b"/early-hold":
        c.sendall(b"HTTP/1.1 413 Too Large\r\nContent-Length: 3\r\n\r\nbig"); time.sleep(5); return
    if path == b"/early-close":
        c.sendall(b"HTTP/1.1 413 Too Large\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbig"); return
    if path == b"/early-chunked-stream":   # streams a chunked response while not reading
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(5): c.sendall(b"4\r\npart\r\n"); time.sleep(0.2)
        c.sendall(b"0\r\n\r\n"); time.sleep(3); return

def run(binary):
    be = Backend(h); port = free_port()
    p = start_switch(binary, rules(port, [be.port]), port)
    out = []
    try:
        for path in (b"/early-hold", b"/early-close", b"/early-chunked-stream"):
            c = socket.create_connection(("127.0.0.1", port)); c.settimeout(0.1)
            c.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: t\r\nContent-Length: 50000000\r\n\r\n")
            got = b""; sent = 0; t0 = time.time(); end = t0 + 6; closed = False
            chunk = b"x" * 65536
            while time.time() < end:
                try:
                    c.setblocking(False)
                    try: sent += c.send(chunk)
                    except (BlockingIOError, socket.timeout): pass
                    except (BrokenPipeError, ConnectionResetError): got += b"<SENDERR>"; break
                    c.settimeout(0.05)
                    d = c.recv(65536)
                    if not d: closed = True; break
                    got += d
                except socket.timeout: pass
                except ConnectionResetError: got += b"<RST>"; break
            out.append((path.decode(), got[:200], closed, "sent>1MB" if sent > 1 << 20 else f"sent {sent}", round(time.time() - t0, 1)))
            c.close()
    finally:
        p.terminate(); p.wait()
    return out

if __name__ == "__main__":
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k]))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for o, n in zip(res["old"], res["new"]):
        print(f"### {o[0]}:\n  old: {o[1:]}\n  new: {n[1:]}")
