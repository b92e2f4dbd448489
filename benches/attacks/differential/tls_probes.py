#!/usr/bin/env python3
"""The HTTP probes over a TLS-terminating service (rustls), plus removed-service keep-alive; old vs new.
Usage: tls_probes.py"""
import re, socket, ssl, sys, time, threading, os, signal
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *
import http_probes as hp

# A self-signed certificate for t.example, made for this run.
CERT, KEY = os.path.join(TMP, "c.pem"), os.path.join(TMP, "k.pem")
subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-nodes", "-days", "1", "-subj", "/CN=t.example", "-addext", "subjectAltName=DNS:t.example",
                "-keyout", KEY, "-out", CERT], check=True, capture_output=True)

NAMES = ["pipeline3", "pipeline-after-chunked-body", "chunked-split", "head-cl", "204bad", "trailer-resp", "continue",
         "early-answer", "shortcl", "noresp", "ws", "ws-halfclose", "connect", "connect-halfclose", "big-upload-pipelined",
         "big-resp-pipelined", "expect-rejected-no-body", "client-conclose", "http10-te", "close-delimited"]

def tls_talk(port, chunks, read_for=2.5, shut=False):
    ctx = ssl.create_default_context(cafile=CERT)
    raw = socket.create_connection(("127.0.0.1", port))
    c = ctx.wrap_socket(raw, server_hostname="t.example"); c.settimeout(0.2)
    got = b""
    def rd():
        nonlocal got
        try:
            d = c.recv(65536)
            if not d: return False
            got += d
        except socket.timeout: pass
        except ssl.SSLWantReadError: pass
        return True
    for ch in chunks:
        if isinstance(ch, float):
            end = time.time() + ch
            while time.time() < end:
                if not rd(): break
        else: c.sendall(ch)
    if shut:
        try: c.unwrap()  # close_notify: TLS's half close
        except Exception: pass
    end = time.time() + read_for; closed = False
    while time.time() < end:
        try:
            d = c.recv(65536)
            if not d: closed = True; break
            got += d
        except socket.timeout: pass
        except (ConnectionResetError, ssl.SSLError) as e: got += b"<" + type(e).__name__.encode() + b">"; closed = True; break
    c.close()
    return got + (b"<CLOSED>" if closed else b"<OPEN>")

def run(binary):
    be = Backend(hp.handler); port = free_port()
    p = start_switch(binary, rules(port, [be.port], extra_virtual=f'connect = true\ntls = [{{ cert = "{CERT}", key = "{KEY}" }}]'), port)
    out = {}
    try:
        for name in NAMES:
            be.log.clear(); spec = hp.PROBES[name]
            got = tls_talk(port, spec[1], shut=True) if isinstance(spec, tuple) else tls_talk(port, spec)
            time.sleep(0.2)
            out[name] = (hp.norm(got), [tuple(hp.norm(x) if isinstance(x, bytes) else x for x in l) for l in be.log])
    finally:
        p.terminate(); p.wait()
    # removed service: keep-alive client on service c, reload removes c
    be2 = Backend(hp.handler); a, c = free_port(), free_port()
    txt = rules(a, [be2.port]) + f'[virtual.c]\nlisten = "127.0.0.1:{c}"\ndefault_pool = "app"\n'
    p = start_switch(binary, txt, a)
    try:
        s = socket.create_connection(("127.0.0.1", c)); s.settimeout(2)
        s.sendall(hp.G(b"/one")); time.sleep(0.3); first = s.recv(65536)
        open(p.rules, "w").write(rules(a, [be2.port])); os.kill(p.pid, signal.SIGHUP); time.sleep(0.5)
        s.sendall(hp.G(b"/two")); time.sleep(0.5)
        try: second = s.recv(65536)
        except Exception as e: second = repr(e).encode()
        try: third = s.recv(65536) or b"<CLOSED>"
        except Exception as e: third = repr(e).encode()
        out["removed-service keepalive"] = (first + b" || " + second + b" || " + third, [])
    finally:
        p.terminate(); p.wait()
    return out

if __name__ == "__main__":
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k]))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for n in res["old"]:
        o, nw = res["old"][n], res["new"][n]
        same = "SAME" if o[0] == nw[0] else "DIFF"; sb = "same-backend" if o[1] == nw[1] else "DIFF-backend"
        print(f"### {n}: {same} {sb}")
        if same == "DIFF" or sb != "same-backend":
            print("  old:", o[0][:300], o[1][:4]); print("  new:", nw[0][:300], nw[1][:4])
        else:
            print("  both:", o[0][:200] if len(o[0]) < 2000 else (len(o[0]), o[0][-80:]))
