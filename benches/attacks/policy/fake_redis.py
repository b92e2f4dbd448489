"""A fake Redis on 127.0.0.1:PORT that answers PING/commands normally-ish but the
EVALSHA/EVAL exchange with MODE: huge (tat = 2^63 µs), bigarray (*2^31 header then stall),
bulkbomb ($2^31 bulk then a stream of bytes), garbage, short (fewer answers), error."""
import socket, sys, threading, time

PORT = int(sys.argv[1]); MODE = sys.argv[2]
DURATION = float(sys.argv[3]) if len(sys.argv) > 3 else 20

def parse_cmds(buf):
    """Yields (cmd name, argc) for complete RESP arrays; returns rest."""
    out = []
    while buf.startswith(b"*"):
        try:
            end = buf.index(b"\r\n"); n = int(buf[1:end]); pos = end + 2; args = []
            for _ in range(n):
                e = buf.index(b"\r\n", pos); ln = int(buf[pos + 1:e]); pos = e + 2
                if len(buf) < pos + ln + 2: raise ValueError
                args.append(buf[pos:pos + ln]); pos += ln + 2
        except ValueError:
            break
        out.append(args); buf = buf[pos:]
    return out, buf

def serve(c):
    buf = b""
    c.settimeout(DURATION)
    try:
        while True:
            d = c.recv(65536)
            if not d: return
            buf += d
            cmds, buf = parse_cmds(buf)
            for args in cmds:
                name = args[0].upper()
                if name in (b"EVALSHA", b"EVAL"):
                    nkeys = int(args[2])
                    if MODE == "huge":
                        c.sendall(b"*%d\r\n" % nkeys + b":9223372036854775807\r\n" * nkeys)
                    elif MODE == "bigarray":
                        c.sendall(b"*2147483647\r\n:1\r\n")
                    elif MODE == "bulkbomb":
                        c.sendall(b"$2147483647\r\n")
                        chunk = b"A" * 65536
                        end = time.time() + 2
                        while time.time() < end:
                            c.sendall(chunk)
                    elif MODE == "garbage":
                        c.sendall(b"\x00\xff garbage\r\n")
                    elif MODE == "short":
                        c.sendall(b"*0\r\n")
                    else:
                        c.sendall(b"-ERR nope\r\n")
                elif name == b"PING":
                    c.sendall(b"+PONG\r\n")
                elif name == b"HELLO":
                    c.sendall(b"-ERR unknown command\r\n")
                else:
                    c.sendall(b"+OK\r\n")
    except OSError:
        pass
    finally:
        c.close()

s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", PORT)); s.listen(64); s.settimeout(1)
end = time.time() + DURATION
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()
