#!/usr/bin/python3
"""A gRPC backend and client for the t/85-grpc*.t tests (Debian's python3-grpcio, no protoc:
generic handlers with raw bytes).

    grpc_peer.py serve PORT HITS_FILE [CERT KEY]

serves (on GRPC_PEER_WORKERS threads from the environment, 8 by default: what it serves at
once) every unary method of test.Echo (and grpc.health.v1.Health/Check) on 127.0.0.1:PORT,
over cleartext HTTP/2 (over TLS with CERT and KEY, PEM files), and appends one line per call
to HITS_FILE (the method's path; for the health check, the path and the service asked for,
"-" for the server's own health). What
it answers is re-read from "HITS_FILE.mode" for every call, as CB::Origin's behave(): the
first line "PREFIX CODE HOW" whose PREFIX starts the method's path ("*" matches any), CODE a
grpc-status number (0 is OK), HOW "only" (a trailers-only answer: grpc-status in the one
HEADERS frame that ends the stream), "end" (headers first, then the status in trailers) or
"sleepMS" (the answer after MS milliseconds, trailers-only);
no file or no line: OK. The health check answers SERVING unless its line's CODE is not 0
(then NOT_SERVING); it knows the services "" and "test.Echo", and answers NOT_FOUND for any
other, as grpcio's own health servicer does. With HOW "big" it answers SERVING in a message
padded by an unknown 4 KB field: a health answer larger than any the probe reads.
Methods under test.Echo/Big stream 64 messages of 128 KB back for the one they are sent, then
end with their line's CODE in trailers (an answer whose end says more than its header).
Methods under test.Echo/Drip stream a message back every 100 ms, 20 of them with CODE 0 (2 s,
longer than a client's short deadline), else 3 and then CODE in trailers (the origin's own
end after 300 ms).
Methods under test.Echo/Quiet stream one message back, then nothing until the call ends (at
most 10 s): a watch with nothing more to report.
Methods under test.Echo/Parse take a message with at most a string field 1 (a
HealthCheckRequest's shape): any other bytes fail to parse, as a protobuf message's FromString
fails, and grpcio itself answers INTERNAL ("Exception deserializing request!") without calling
the method.
The server exits once the process that started it is gone.

    grpc_peer.py call PORT N [SERVICE/METHOD]

makes N unary calls through 127.0.0.1:PORT (one channel, no retries, 5 s deadline each) and
prints one line per call: "CODE pushback=MS state=STATE message=MESSAGE" (CODE the
grpc-status number the client saw; MS and STATE from the answer's metadata, "-" when absent).

    grpc_peer.py streams PORT N COUNT INTERVAL_MS SERVICE/METHOD

opens N client streams at once (stream-unary calls of test.Echo/Stream…, which the backend
counts: "PATH MESSAGES" in HITS_FILE), the K-th (from 0) sending COUNT + K messages
INTERVAL_MS apart (so that they end one by one), and prints each call's grpc-status as it
ends: clients that trickle their request bodies.
"""

import os
import sys
import threading
import time
from concurrent import futures

import grpc


def mode(hits, path):
    try:
        with open(hits + ".mode") as f:
            for line in f:
                words = line.split()
                if len(words) == 3 and (words[0] == "*" or path.startswith(words[0])):
                    return int(words[1]), words[2]
    except OSError:
        pass
    return 0, "only"


def asked_service(request):
    """HealthCheckRequest.service: field 1, length-delimited (empty: the default)."""
    if not request:
        return ""
    if request[0] != 0x0A:
        return None
    n, shift, i = 0, 0, 1
    while i < len(request):
        b = request[i]
        n |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            break
        shift += 7
    return request[i : i + n].decode("utf-8", "replace")


def serve(port, hits, tls=None):
    lock = threading.Lock()

    def note(path):
        with lock, open(hits, "a") as f:
            f.write(path + "\n")

    def unary(path):
        def handle(request, context):
            note(path)
            code, how = mode(hits, path)
            if how.startswith("sleep"):
                time.sleep(int(how[5:]) / 1000)
            if code == 0:
                return b"ok"
            if how == "end":
                context.send_initial_metadata(())
            context.abort(grpc.StatusCode(_codes[code]), "origin says %d" % code)

        return handle

    def health(request, context):
        path = "/grpc.health.v1.Health/Check"
        service = asked_service(request)
        note("%s %s" % (path, service or "-"))
        code, how = mode(hits, path)
        if how == "big":
            # field 2, length-delimited, 4096 bytes (varint 0x80 0x20)
            return b"\x08\x01\x12\x80\x20" + b"x" * 4096
        if service not in ("", "test.Echo"):
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        # HealthCheckResponse { status = 1 (SERVING) | 2 (NOT_SERVING) }: field 1, varint.
        return b"\x08\x01" if code == 0 else b"\x08\x02"

    def big(path):
        def handle(request, context):
            note(path)
            for _ in range(64):
                yield b"x" * (128 << 10)
            ends(context, mode(hits, path)[0])

        return handle

    def drip(path):
        def handle(request, context):
            note(path)
            code, _ = mode(hits, path)
            for _ in range(20 if code == 0 else 3):
                if not context.is_active():
                    return
                yield b"d"
                time.sleep(0.1)
            ends(context, code)

        return handle

    def quiet(path):
        def handle(request, context):
            note(path)
            yield b"q"
            end = time.time() + 10
            while context.is_active() and time.time() < end:
                time.sleep(0.1)

        return handle

    def stream(path):
        def handle(requests, context):
            n = sum(1 for _ in requests)
            note("%s %d" % (path, n))
            return b"ok"

        return handle

    ident = lambda b: b  # noqa: E731

    def strict(b):
        if b and (b[0] != 0x0A or len(b) < 2 or len(b) != 2 + b[1]):
            raise ValueError("not a message of the method's type")
        return b

    class Any(grpc.GenericRpcHandler):
        def service(self, details):
            path = details.method
            if path == "/grpc.health.v1.Health/Check":
                return grpc.unary_unary_rpc_method_handler(health, ident, ident)
            if path.startswith("/test.Echo/Stream"):
                return grpc.stream_unary_rpc_method_handler(stream(path), ident, ident)
            if path.startswith("/test.Echo/Quiet"):
                return grpc.unary_stream_rpc_method_handler(quiet(path), ident, ident)
            if path.startswith("/test.Echo/Drip"):
                return grpc.unary_stream_rpc_method_handler(drip(path), ident, ident)
            if path.startswith("/test.Echo/Big"):
                return grpc.unary_stream_rpc_method_handler(big(path), ident, ident)
            if path.startswith("/test.Echo/Parse"):
                return grpc.unary_unary_rpc_method_handler(unary(path), strict, ident)
            if path.startswith("/test.Echo/"):
                return grpc.unary_unary_rpc_method_handler(unary(path), ident, ident)
            return None

    # No SO_REUSEPORT (grpcio sets it by default): a port taken is an error, not a second
    # server sharing it.
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=int(os.environ.get("GRPC_PEER_WORKERS", "8"))),
        handlers=[Any()],
        options=[("grpc.so_reuseport", 0)],
    )
    if tls:
        with open(tls[0], "rb") as c, open(tls[1], "rb") as k:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())])
        server.add_secure_port("127.0.0.1:%d" % port, creds)
    else:
        server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.2)
    server.stop(0)


def ends(context, code):
    """Ends a streaming call with grpc-status CODE in its trailers (0: OK, nothing to do)."""
    if code != 0:
        context.abort(grpc.StatusCode(_codes[code]), "origin says %d" % code)


# grpc.StatusCode by number
_codes = {c.value[0]: c.value for c in grpc.StatusCode}


def call(port, n, method):
    options = [("grpc.enable_retries", 0)]
    with grpc.insecure_channel("127.0.0.1:%d" % port, options=options) as ch:
        rpc = ch.unary_unary(method)
        for _ in range(n):
            try:
                _, c = rpc.with_call(b"hi", timeout=5)
            except grpc.RpcError as e:
                c = e
            md = {}
            for k, v in list(c.initial_metadata() or ()) + list(c.trailing_metadata() or ()):
                md.setdefault(k, v)
            print(
                "%d pushback=%s state=%s message=%s"
                % (
                    c.code().value[0],
                    md.get("grpc-retry-pushback-ms", "-"),
                    md.get("x-circuit-state", "-"),
                    c.details() or "-",
                ),
                flush=True,
            )


def streams(port, n, count, interval_ms, method):
    """N client streams at once, the K-th sending COUNT + K messages INTERVAL_MS apart: one
    line per stream, its grpc-status, in the order they end."""
    options = [("grpc.enable_retries", 0)]
    with grpc.insecure_channel("127.0.0.1:%d" % port, options=options) as ch:
        rpc = ch.stream_unary(method)

        printing = threading.Lock()

        def slowly(k):
            for i in range(count + k):
                if i:
                    time.sleep(interval_ms / 1000)
                yield b"x"

        def one(k):
            try:
                _, c = rpc.with_call(slowly(k), timeout=60)
            except grpc.RpcError as e:
                c = e
            with printing:
                print("%d" % c.code().value[0], flush=True)

        threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]), sys.argv[3], sys.argv[4:6] if len(sys.argv) > 5 else None)
    elif sys.argv[1] == "call":
        method = sys.argv[4] if len(sys.argv) > 4 else "test.Echo/Unary"
        call(int(sys.argv[2]), int(sys.argv[3]), "/" + method)
    elif sys.argv[1] == "streams":
        port, n, count, interval = (int(a) for a in sys.argv[2:6])
        streams(port, n, count, interval, "/" + sys.argv[6])
