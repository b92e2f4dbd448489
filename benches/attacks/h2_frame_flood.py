#!/usr/bin/env python3
"""An HTTP/2 connection flooding frames that cost the sender nothing (issue 42, item 2), against
one tcpvs binary run as an operator runs it: the default log filter (no RUST_LOG), one worker,
one plain HTTP/2 (prior knowledge) service before a small HTTP/1.1 backend of this script.

Usage: h2_frame_flood.py TCPVS_BINARY [KIND] [SECONDS]
  KIND: ping-ack (default; unsolicited PING ACKs), ping, window-update (connection level,
        increment 1), priority-update (type 0x10), unknown (type 0xfa), settings-ack
  SECONDS: how long the flood may last (default 5, at most 60)

One connection writes KIND frames as fast as the kernel takes them (batches of 4096) and reads
what the switch sends meanwhile, until the switch closes it or SECONDS pass. Meanwhile an honest
HTTP/1.1 client on another connection (the same worker: workers = 1) sends GET after GET for
the whole SECONDS, however soon the flood ends. Prints
one JSON line: frames written, when the switch's GOAWAY came and with which code, when the
connection was closed (EOF or reset), the log lines and bytes the switch wrote from the start of
the flood to the end of the run, and the honest client's requests and slowest answer.
Needs python3 only. Loads only 127.0.0.1; every loop is bounded by SECONDS or a count.
"""
import json, os, select, shutil, socket, struct, subprocess, sys, tempfile, threading, time

KINDS = {
    "ping-ack": (0x6, 0x1, 0, b"\xa5" * 8),
    "ping": (0x6, 0x0, 0, b"\x5a" * 8),
    "window-update": (0x8, 0x0, 0, struct.pack(">I", 1)),
    # PRIORITY_UPDATE (RFC 9218) for stream 1: "u=3".
    "priority-update": (0x10, 0x0, 0, struct.pack(">I", 1) + b"u=3"),
    "unknown": (0xFA, 0x0, 0, b"x" * 8),
    "settings-ack": (0x4, 0x1, 0, b""),
}
GOAWAY = 0x7
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def backend(listener, stop):
    """Answers every request head with a 2-byte body, keep-alive; one thread per connection."""
    def serve(conn):
        buf = b""
        with conn:
            for _ in range(1_000_000):
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                _, buf = buf.split(b"\r\n\r\n", 1)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def wait_port(port, seconds=10.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def honest(port, stop, result):
    """GET after GET on one keep-alive connection; the slowest answer and how many came."""
    slowest, count = 0.0, 0
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)
    while not stop.is_set() and count < 10_000_000:
        start = time.monotonic()
        s.sendall(b"GET /honest HTTP/1.1\r\nHost: h\r\n\r\n")
        buf = b""
        while not buf.endswith(b"ok"):
            data = s.recv(4096)
            if not data:
                result["error"] = "honest connection closed"
                return
            buf += data
        slowest = max(slowest, time.monotonic() - start)
        count += 1
        time.sleep(0.005)
    result.update(honest_requests=count, honest_slowest_ms=round(slowest * 1000, 1))


def flood(port, kind, seconds):
    one = frame(*KINDS[kind])
    batch = one * 4096
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(False)
    out = PREFACE + frame(0x4, 0, 0, b"") + frame(0x4, 0x1, 0, b"")
    start = time.monotonic()
    written = -len(out)
    inbuf = b""
    goaway = None
    closed_at = None
    pending = out
    while time.monotonic() - start < seconds:
        r, w, _ = select.select([s], [s] if closed_at is None else [], [], 0.1)
        if r:
            try:
                data = s.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                closed_at = time.monotonic() - start
                break
            inbuf += data
            while len(inbuf) >= 9:
                length = int.from_bytes(inbuf[:3], "big")
                if len(inbuf) < 9 + length:
                    break
                if inbuf[3] == GOAWAY and goaway is None and length >= 8:
                    code = int.from_bytes(inbuf[13:17], "big")
                    goaway = (round((time.monotonic() - start) * 1000, 1), code)
                inbuf = inbuf[9 + length:]
        if w:
            if not pending:
                pending = batch
            try:
                n = s.send(pending)
            except (BlockingIOError, InterruptedError):
                n = 0
            except (ConnectionResetError, BrokenPipeError):
                closed_at = time.monotonic() - start
                break
            written += n
            pending = pending[n:]
    s.close()
    return {
        "frames_written": max(written, 0) // len(one),
        "goaway_ms_code": goaway,
        "closed_ms": None if closed_at is None else round(closed_at * 1000, 1),
    }


def main():
    binary = sys.argv[1]
    kind = sys.argv[2] if len(sys.argv) > 2 else "ping-ack"
    seconds = min(float(sys.argv[3]) if len(sys.argv) > 3 else 5.0, 60.0)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    stop = threading.Event()
    threading.Thread(target=backend, args=(listener, stop), daemon=True).start()
    port = free_port()
    work = tempfile.mkdtemp(prefix="h2-frame-flood-")
    rules = os.path.join(work, "rules.toml")
    with open(rules, "w") as f:
        f.write(
            f'[switch]\nworkers = 1\naccess_log = false\n'
            f'[virtual.web]\nlisten = "127.0.0.1:{port}"\ndefault_pool = "p"\n'
            f'[pool.p]\nservers = [{{ addr = "127.0.0.1:{listener.getsockname()[1]}" }}]\n'
        )
    log_path = os.path.join(work, "tcpvs.log")
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    with open(log_path, "wb") as log:
        switch = subprocess.Popen([binary, "run", "-c", rules], stderr=log, stdout=subprocess.DEVNULL, env=env)
    try:
        if not wait_port(port):
            sys.exit("tcpvs did not listen")
        time.sleep(0.2)
        before = os.path.getsize(log_path)
        with open(log_path, "rb") as f:
            lines_before = f.read().count(b"\n")
        result = {"kind": kind, "seconds": seconds}
        honest_stop = threading.Event()
        honest_thread = threading.Thread(target=honest, args=(port, honest_stop, result), daemon=True)
        honest_thread.start()
        started = time.monotonic()
        result.update(flood(port, kind, seconds))
        # The honest client goes on for the whole SECONDS, however soon the flood ended.
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        honest_stop.set()
        honest_thread.join(35)
    finally:
        switch.terminate()
        switch.wait(30)
        stop.set()
    with open(log_path, "rb") as f:
        text = f.read()
    # The old builds' logs ran to hundreds of MB: nothing is left behind.
    shutil.rmtree(work, ignore_errors=True)
    flood_part = text[before:]
    # The lines of the stop itself (SIGTERM) are not the flood's.
    lines = [l for l in flood_part.split(b"\n") if l and b"stopping" not in l and b"stopped" not in l]
    result.update(
        log_lines=len(lines),
        log_bytes=sum(len(l) + 1 for l in lines),
        log_sample=[l.decode(errors="replace")[:160] for l in lines[:3]],
        log_lines_at_start=lines_before,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
