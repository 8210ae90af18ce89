#!/usr/bin/python3
"""Hostile gRPC clients (raw HTTP/2, see h2mini.py), for t/37-grpc-levers.t and t/38-http-levers.t.

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
  levers.py stall_get PORT PATH N SECONDS          the same N GETs, reading nothing for SECONDS;
                                                   then every window opens and each is read to
                                                   its end; prints 'ended N of M, B bytes'
"""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h2mini

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
elif cmd == 'stall_get':
    n, secs = int(sys.argv[4]), float(sys.argv[5])
    c = h2mini.Conn(port, settings={4: 0})
    sids = [c.request([(':method', 'GET'), (':scheme', 'http'), (':path', '%s%d' % (path, i)),
                       (':authority', 'localhost')]) for i in range(n)]
    end = time.time() + secs
    while time.time() < end:
        c.poll(0.5, auto_window=False)
    for sid in sids:
        c.winup(sid, 1 << 30)
    c.winup(0, 1 << 30)
    end = time.time() + 30
    while time.time() < end and not all(c.streams[s]['end'] for s in sids):
        if not c.poll(0.1):
            break
    print('ended %d of %d, %d bytes' % (sum(c.streams[s]['end'] for s in sids), n,
                                        sum(c.streams[s]['data'] for s in sids)))
