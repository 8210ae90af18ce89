#!/usr/bin/python3
"""Hostile clients, for t/37-grpc-levers.t, t/38-http-levers.t, t/87-held-answers.t,
t/88-keyed-cut.t and t/89-grpc-held.t: raw HTTP/2 (h2mini.py), and HTTP/1.1 over TLS.

  levers.py timeout PORT PATH N VALUE[|VALUE...]   N calls, each with these grpc-timeout headers
  levers.py zerowin PORT PATH N SECONDS            N calls on one connection whose stream windows
                                                   are 0 (SETTINGS_INITIAL_WINDOW_SIZE=0), kept
                                                   open SECONDS, reading nothing
  levers.py flood PORT PATH RATE SECONDS VALUE     calls with grpc-timeout VALUE at RATE/s
  levers.py legit PORT PATH RATE SECONDS           plain calls; prints 'served N of M'
  levers.py stream PORT PATH RATE SECONDS          calls whose body never ends (1 byte of a
                                                   100-byte message), kept open
  levers.py zerowin_get PORT PATH N SECONDS        N GETs (PATH0, PATH1, ...) on one connection
                                                   whose stream windows are 0, kept open SECONDS
  levers.py stall_get PORT PATH N SECONDS [TIMES PREFIX]
                                                   the same N GETs, reading nothing: until the
                                                   origin's times file TIMES has N requests
                                                   whose path starts with PREFIX, if given,
                                                   then SECONDS more; then every window opens
                                                   and each is read to its end; prints
                                                   'ended N of M, B bytes'
  levers.py held_tls PORT PATH N SECONDS [TIMES PREFIX]
                                                   N HTTP/1.1 GETs over TLS (no certificate
                                                   check), 4 KB socket buffers, held as
                                                   stall_get holds them, then read to the end;
                                                   prints 'answered N of M'
  levers.py grpc_wait PORT PATH N SECONDS [VALUE]  N calls at once on one connection (with
                                                   grpc-timeout VALUE), read as they come for
                                                   SECONDS; prints 'ended N of M'
  levers.py cancel_get PORT PATH N [NAME:VALUE]     N GETs (PATH0, PATH1, ...) one after another
                                                   on one connection, with this header: each
                                                   cancelled (RST_STREAM CANCEL) once its
                                                   header and 64 KB of its body came (its
                                                   window: 128 KB); prints
                                                   'cancelled N of M'
  levers.py grpc_held PORT PATH N SECONDS [HITS]   N calls (PATH0, PATH1, ...) on one connection
                                                   whose stream windows are 0 until the origin's
                                                   hits file HITS, if given, has N lines that
                                                   start with PATH, then SECONDS more; then
                                                   opened, each read to its end; with SECONDS
                                                   0, one call at a time, read as it comes;
                                                   prints 'ended N of M, B bytes'
  levers.py stall_tcp_get PORT PATH N SECONDS [TIMES PREFIX]
                                                   the same, with windows as large as can be
                                                   and a 4 KB socket buffer that the client
                                                   does not read meanwhile
"""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h2mini


def gave_up(times, prefix, n):
    """Whether the origin's times file TIMES has N requests whose path starts with PREFIX
    (each ended: answered, or given up on)."""
    try:
        with open(times) as f:
            return sum(1 for l in f if len(l.split()) > 2 and l.split()[2].startswith(prefix)) >= n
    except OSError:
        return False


def drain(c, sids, open_windows):
    """Opens the streams' windows (and the connection's) if asked, reads every stream to its
    end (30 s at most), and prints 'ended N of M, B bytes'."""
    if open_windows:
        for sid in sids:
            c.winup(sid, 1 << 30)
        c.winup(0, 1 << 30)
    end = time.time() + 30
    while time.time() < end and not all(c.streams[s]['end'] for s in sids):
        if not c.poll(0.1):
            break
    print('ended %d of %d, %d bytes' % (sum(c.streams[s]['end'] for s in sids), len(sids),
                                        sum(c.streams[s]['data'] for s in sids)))


cmd, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if cmd == 'timeout':
    n, values = int(sys.argv[4]), sys.argv[5].split('|')
    c = h2mini.Conn(port)
    for i in range(n):
        s = c.request(h2mini.grpc_headers(path, port, [('grpc-timeout', v) for v in values if v != '-']), h2mini.GRPC_EMPTY)
        c.wait(s, 5)
elif cmd == 'zerowin':
    n, secs = int(sys.argv[4]), float(sys.argv[5])
    c = h2mini.Conn(port, settings={4: 0})
    for i in range(n):
        c.request(h2mini.grpc_headers(path, port), h2mini.GRPC_EMPTY)
    end = time.time() + secs
    while time.time() < end:
        c.poll(0.5, auto_window=False)
elif cmd == 'flood':
    rate, secs, v = float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
    c = h2mini.Conn(port); end = time.time() + secs
    while time.time() < end:
        c.request(h2mini.grpc_headers(path, port, [('grpc-timeout', v)]), h2mini.GRPC_EMPTY)
        c.poll(1 / rate)
elif cmd == 'legit':
    rate, secs = float(sys.argv[4]), float(sys.argv[5])
    c = h2mini.Conn(port); end = time.time() + secs; n = ok = 0
    while time.time() < end:
        s = c.request(h2mini.grpc_headers(path, port), h2mini.GRPC_EMPTY); r = c.wait(s, 5)
        n += 1
        # a served call has a DATA frame (the message); a short-circuit is trailers-only
        ok += r['data'] > 0
        time.sleep(1 / rate)
    print('served %d of %d' % (ok, n))
elif cmd == 'stream':
    rate, secs = float(sys.argv[4]), float(sys.argv[5])
    c = h2mini.Conn(port); end = time.time() + secs
    while time.time() < end:
        c.request(h2mini.grpc_headers(path, port), b'\x00\x00\x00\x00\x64x', end=False)
        c.poll(1 / rate, auto_window=False)
    c.poll(secs, auto_window=False)
if cmd == 'zerowin_get':
    n, secs = int(sys.argv[4]), float(sys.argv[5])
    c = h2mini.Conn(port, settings={4: 0})
    for i in range(n):
        c.request([(':method', 'GET'), (':scheme', 'http'), (':path', '%s%d' % (path, i)), (':authority', 'localhost')])
    end = time.time() + secs
    while time.time() < end:
        c.poll(0.5, auto_window=False)
elif cmd == 'held_tls':
    import socket, ssl
    n, secs = int(sys.argv[4]), float(sys.argv[5])
    times, prefix = (sys.argv[6], sys.argv[7]) if len(sys.argv) > 7 else (None, None)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    conns = []
    for i in range(n):
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.connect(('127.0.0.1', port))
        s = ctx.wrap_socket(raw, server_hostname='localhost')
        s.sendall(('GET %s%d HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' % (path, i)).encode())
        conns.append(s)

    if times:
        limit = time.time() + 30
        while time.time() < limit and not gave_up(times, prefix, n):
            time.sleep(0.1)
    time.sleep(secs)
    answered = 0
    for s in conns:
        head, end = b'', time.time() + 20
        s.settimeout(20)
        while time.time() < end:
            try:
                d = s.recv(65536)
            except (OSError, ssl.SSLError):
                break
            if not d:
                break
            if len(head) < 64:
                head += d[:64]
        answered += head.startswith(b'HTTP/1.1 200')
        s.close()
    print('answered %d of %d' % (answered, n))
elif cmd == 'grpc_wait':
    n, secs = int(sys.argv[4]), float(sys.argv[5])
    extra = [('grpc-timeout', sys.argv[6])] if len(sys.argv) > 6 else []
    c = h2mini.Conn(port)
    sids = [c.request(h2mini.grpc_headers(path, port, extra), h2mini.GRPC_EMPTY) for _ in range(n)]
    end = time.time() + secs
    while time.time() < end and c.poll(0.1):
        pass
    print('ended %d of %d' % (sum(c.streams[s]['end'] for s in sids), n))
elif cmd == 'grpc_held':
    n, secs = int(sys.argv[4]), float(sys.argv[5])
    c = h2mini.Conn(port, settings={4: 0} if secs else None)
    sids = []
    for i in range(n):
        sids.append(c.request(h2mini.grpc_headers('%s%d' % (path, i), port), h2mini.GRPC_EMPTY))
        if not secs:
            c.wait(sids[-1], 30)
    def begun():
        try:
            with open(sys.argv[6]) as f:
                return sum(1 for l in f if l.startswith(path)) >= n
        except OSError:
            return False

    end = time.time() + 30
    while secs and len(sys.argv) > 6 and time.time() < end and not begun():
        c.poll(0.1, auto_window=False)
    end = time.time() + secs
    while time.time() < end:
        c.poll(0.1, auto_window=False)
    drain(c, sids, bool(secs))
elif cmd == 'cancel_get':
    n = int(sys.argv[4])
    extra = [tuple(sys.argv[5].lower().split(':', 1))] if len(sys.argv) > 5 else []
    # Stream windows of 128 KB that the client never opens further: each answer stops there.
    c = h2mini.Conn(port, settings={4: 1 << 17}, conn_window=1 << 30)
    cancelled = 0
    for i in range(n):
        sid = c.request([(':method', 'GET'), (':scheme', 'http'), (':path', '%s%d' % (path, i)),
                         (':authority', 'localhost')] + extra)
        st, end = c.streams[sid], time.time() + 10
        while time.time() < end and not st['end'] and (st['status'] is None or st['data'] < 65536):
            if not c.poll(0.05, auto_window=False):
                break
        if st['status'] is not None and not st['end']:
            c.rst(sid)
            cancelled += 1
    c.poll(0.2)
    print('cancelled %d of %d' % (cancelled, n))
elif cmd in ('stall_get', 'stall_tcp_get'):
    n, secs = int(sys.argv[4]), float(sys.argv[5])
    times, prefix = (sys.argv[6], sys.argv[7]) if len(sys.argv) > 7 else (None, None)
    tcp = cmd == 'stall_tcp_get'
    if tcp:
        c = h2mini.Conn(port, settings={4: (1 << 31) - 1}, conn_window=(1 << 31) - 1 - 65535, rcvbuf=4096)
    else:
        c = h2mini.Conn(port, settings={4: 0})
    sids = [c.request([(':method', 'GET'), (':scheme', 'http'), (':path', '%s%d' % (path, i)),
                       (':authority', 'localhost')]) for i in range(n)]

    def hold(until):
        while time.time() < until():
            if tcp:
                time.sleep(0.1)
            else:
                c.poll(0.1, auto_window=False)

    if times:
        limit = time.time() + 30
        hold(lambda: limit if not gave_up(times, prefix, n) else 0)
    end = time.time() + secs
    hold(lambda: end)
    drain(c, sids, not tcp)
