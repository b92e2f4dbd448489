#!/usr/bin/env python3
"""A slow but alive web server for benches/attacks/overload.sh: one connection at a time, a small
listen backlog, DELAY_MS of work per request, then `Connection: close`.

Usage: slow_server.py PORT BACKLOG DELAY_MS

Like a prefork server with one worker: while it works on a request, new connections wait in the
kernel's accept queue (BACKLOG deep); beyond it the kernel drops their SYNs, so a client's connect
waits for a SYN retransmission (1 s, then 3 s...) and may time out although the server is fine.
"""
import socket, sys, time

port, backlog, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(backlog)
body = b"slow but alive\n"
answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
while True:
    conn, _ = listener.accept()
    conn.settimeout(5)
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
        if head:
            time.sleep(delay)
            conn.sendall(answer)
    except OSError:
        pass
    finally:
        conn.close()
