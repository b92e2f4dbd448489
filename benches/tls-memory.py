"""Holds N idle keep-alive TLS connections to ADDR, each after one request, for benches/tls-memory.sh.

Usage: tls-memory.py HOST:PORT N. Prints "ready N" once every connection has had its answer,
then keeps them open until stdin closes. Certificates are not verified (the bench's own).
"""
import socket
import ssl
import sys


def main() -> None:
    host, port = sys.argv[1].rsplit(":", 1)
    count = int(sys.argv[2])
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])
    held = []
    for _ in range(count):
        raw = socket.create_connection((host, int(port)))
        tls = context.wrap_socket(raw, server_hostname="bench.test")
        tls.sendall(b"GET /small.html HTTP/1.1\r\nHost: bench.test\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < 100:
            chunk = tls.recv(65536)
            if not chunk:
                raise SystemExit(f"closed after {len(held)} connections")
            answer += chunk
        held.append(tls)
    print(f"ready {len(held)}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
