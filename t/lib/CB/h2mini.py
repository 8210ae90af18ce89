"""Minimal HTTP/2 client for attacks (no HPACK decoding beyond :status)."""
import socket, struct, time, select

PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINUP, CONT = range(10)

def _int(n, prefix, first=0):
    mx = (1 << prefix) - 1
    if n < mx:
        return bytes([first | n])
    out = [first | mx]; n -= mx
    while n >= 128:
        out.append((n & 127) | 128); n >>= 7
    out.append(n)
    return bytes(out)

def _str(s):
    if isinstance(s, str): s = s.encode('latin-1')
    return _int(len(s), 7) + s

def encode(headers):
    b = b''
    for k, v in headers:
        b += b'\x00' + _str(k) + _str(v)
    return b

STATIC_STATUS = {8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500}

def status_of(block):
    if not block: return None
    c = block[0]
    if c & 0x80 and (c & 0x7f) in STATIC_STATUS:
        return STATIC_STATUS[c & 0x7f]
    # literal with indexed name 8 (:status), raw 3-digit value
    if c in (0x48, 0x08, 0x18) and len(block) >= 5 and block[1] == 3:
        try: return int(block[2:5])
        except ValueError: return None
    return None

class Conn:
    def __init__(self, port, host='127.0.0.1', settings=None, conn_window=None, rcvbuf=None):
        if rcvbuf:
            self.s = socket.socket()
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.s.connect((host, port))
        else:
            self.s = socket.create_connection((host, port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b''
        self.next_id = 1
        self.streams = {}
        self.goaway = None
        st = b''
        for k, v in (settings or {}).items():
            st += struct.pack('>HI', k, v)
        self.s.sendall(PREFACE + self.frame(SETTINGS, 0, 0, st))
        if conn_window:
            self.s.sendall(self.frame(WINUP, 0, 0, struct.pack('>I', conn_window)))

    def frame(self, t, flags, sid, payload):
        return struct.pack('>I', len(payload))[1:] + bytes([t, flags]) + struct.pack('>I', sid) + payload

    def request(self, headers, body=None, end=True):
        sid = self.next_id; self.next_id += 2
        self.streams[sid] = {'status': None, 'data': 0, 'end': False, 'rst': None, 'hdrs': [], 't0': time.time(), 't_hdr': None, 't_end': None}
        flags = 4 | (1 if (end and not body) else 0)
        self.s.sendall(self.frame(HEADERS, flags, sid, encode(headers)))
        if body:
            self.data(sid, body, end)
        return sid

    def data(self, sid, body, end=False):
        self.s.sendall(self.frame(DATA, 1 if end else 0, sid, body))

    def rst(self, sid, code=8):
        self.s.sendall(self.frame(RST, 0, sid, struct.pack('>I', code)))

    def winup(self, sid, n):
        self.s.sendall(self.frame(WINUP, 0, sid, struct.pack('>I', n)))

    def poll(self, timeout=0.0, auto_window=True):
        """read what is there; returns False on EOF"""
        end = time.time() + timeout
        while True:
            r, _, _ = select.select([self.s], [], [], max(0, end - time.time()))
            if not r:
                return True
            try:
                d = self.s.recv(65536)
            except (ConnectionResetError, OSError):
                return False
            if not d:
                return False
            self.buf += d
            while len(self.buf) >= 9:
                ln = struct.unpack('>I', b'\0' + self.buf[:3])[0]
                if len(self.buf) < 9 + ln: break
                t, fl = self.buf[3], self.buf[4]
                sid = struct.unpack('>I', self.buf[5:9])[0] & 0x7fffffff
                p = self.buf[9:9 + ln]; self.buf = self.buf[9 + ln:]
                st = self.streams.get(sid)
                if t == SETTINGS and not fl & 1:
                    self.s.sendall(self.frame(SETTINGS, 1, 0, b''))
                elif t == PING and not fl & 1:
                    self.s.sendall(self.frame(PING, 1, 0, p))
                elif t == GOAWAY:
                    self.goaway = p
                elif st is not None:
                    if t == HEADERS:
                        if st['status'] is None:
                            st['status'] = status_of(p); st['t_hdr'] = time.time()
                        st['hdrs'].append(p)
                    elif t == DATA:
                        st['data'] += ln
                        if auto_window and ln:
                            self.winup(sid, ln); self.winup(0, ln)
                    elif t == RST:
                        st['rst'] = struct.unpack('>I', p)[0]; st['end'] = True; st['t_end'] = time.time()
                    if fl & 1 and t in (HEADERS, DATA):
                        st['end'] = True; st['t_end'] = time.time()
            if timeout == 0:
                continue

    def wait(self, sid, timeout=5):
        end = time.time() + timeout
        while not self.streams[sid]['end'] and time.time() < end:
            if not self.poll(min(0.05, end - time.time())):
                break
        return self.streams[sid]

GRPC_EMPTY = b'\x00\x00\x00\x00\x00'

def grpc_headers(path, port, extra=()):
    return [(':method', 'POST'), (':scheme', 'http'), (':path', path), (':authority', '127.0.0.1:%d' % port),
            ('content-type', 'application/grpc'), ('te', 'trailers')] + list(extra)
