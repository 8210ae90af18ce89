//! A client connection opened with nginx's own `ngx_event_connect_peer`, readable and writable
//! by hyper. nginx's read and write events wake the task waiting on them; nothing blocks.
//!
//! The connection is marked `idle`, like a cached upstream keepalive connection: when the
//! worker starts a graceful shutdown (`nginx -s quit`, a reload) `ngx_close_idle_connections`,
//! and when `worker_shutdown_timeout` expires `ngx_shutdown_timer_handler`, call its read
//! handler with `c->close` set. The handler then closes it at once, whatever state the task
//! that owns it is in, so an exiting worker never finds it open ("open socket left in
//! connection").

use core::cell::{Cell, UnsafeCell};
use core::ffi::c_void;
use core::future::poll_fn;
use core::mem;
use core::pin::Pin;
use core::ptr;
use core::task::{Context, Poll, Waker};
use std::io;
use std::rc::Rc;

use nginx_sys::{
    ngx_close_connection, ngx_connection_log_error_e_NGX_ERROR_INFO, ngx_connection_t,
    ngx_event_connect_peer, ngx_event_get_peer, ngx_event_t, ngx_handle_read_event,
    ngx_handle_write_event, ngx_int_t, ngx_log_t, ngx_peer_connection_t, ngx_sockaddr_t,
    ngx_socket_errno, ngx_str_t, socklen_t, ECONNREFUSED, ECONNRESET, EPIPE, NGX_AGAIN,
    NGX_DECLINED, NGX_ERROR, NGX_OK, SOL_SOCKET, SO_ERROR,
};

use ngx::log::ngx_cycle_log;

use super::{Error, Peer};

/// What went wrong at the socket level; read back after hyper reports an error, because hyper's
/// own errors do not reliably say whether the peer refused, reset or nginx closed the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    Refused,
    Reset,
    /// nginx closed the connection: the worker is exiting (or its shutdown timeout expired).
    Exiting,
    /// Any other socket error, as errno.
    Os(i32),
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Error {
        match f {
            Failure::Refused => Error::Refused,
            Failure::Reset => Error::Reset,
            Failure::Exiting => Error::Exiting,
            Failure::Os(errno) => Error::Io(errno),
        }
    }
}

/// State shared with nginx: `c->data` and the log's `data` point here while the connection is
/// open. Everything nginx may write (the peer connection, the log) sits in an `UnsafeCell`;
/// everything Rust changes from an event handler is a `Cell`, so neither side ever holds a
/// `&mut` the other could alias.
pub struct Shared {
    pc: UnsafeCell<ngx_peer_connection_t>,
    log: UnsafeCell<ngx_log_t>,
    sockaddr: UnsafeCell<ngx_sockaddr_t>,
    name: UnsafeCell<ngx_str_t>,
    /// The bytes `name` points to.
    name_bytes: Box<[u8]>,
    /// What the connection is for, in error log lines ("while <action>").
    action: &'static str,
    reader: Cell<Option<Waker>>,
    writer: Cell<Option<Waker>>,
    failure: Cell<Option<Failure>>,
}

impl Shared {
    /// The last socket-level failure seen, if any.
    pub fn failure(&self) -> Option<Failure> {
        self.failure.get()
    }

    fn connection(&self) -> *mut ngx_connection_t {
        // SAFETY: a plain read of a pointer field; nginx writes it only inside
        // ngx_event_connect_peer, which is never running while Rust code runs here.
        unsafe { (*self.pc.get()).connection }
    }

    /// Closes the connection if it is open; idempotent.
    fn close(&self) {
        let c = self.connection();
        if c.is_null() {
            return;
        }
        #[cfg(ngx_ssl)]
        shutdown_tls(c);
        // Clearing the pointer first makes the close happen once. ngx_close_connection removes
        // its events and timers and returns it to the free list; the log (ours) is still alive.
        // The pool, when TLS made one, is the connection's own and used by nothing else.

        // SAFETY: `c` is the open connection this peer connection made, closed once (above);
        // its pool, if any, is its own.
        unsafe {
            (*self.pc.get()).connection = ptr::null_mut();
            let pool = (*c).pool;
            ngx_close_connection(c);
            if !pool.is_null() {
                nginx_sys::ngx_destroy_pool(pool);
            }
        }
    }

    /// Takes both wakers, so that waking them touches nothing of `self` (a woken task may run
    /// at once, finish and free this state).
    fn take_wakers(&self) -> (Option<Waker>, Option<Waker>) {
        (self.reader.take(), self.writer.take())
    }
}

/// An open (or opening) connection. Dropping it closes the socket and releases the nginx
/// connection, its events and timers.
pub struct Stream {
    shared: Rc<Shared>,
}

impl Stream {
    /// Connects to `peer`. Completes when the TCP connection is established or has failed.
    pub async fn connect(peer: &Peer, action: &'static str) -> Result<Stream, Error> {
        Self::connect_as(peer, action, false).await
    }

    /// A datagram socket connected to `peer` (UDP): each send is one datagram, each recv one
    /// datagram from `peer` (cut to the buffer), and a server with nothing on its port makes
    /// the next recv fail as refused.
    pub async fn connect_datagram(peer: &Peer, action: &'static str) -> Result<Stream, Error> {
        Self::connect_as(peer, action, true).await
    }

    async fn connect_as(
        peer: &Peer,
        action: &'static str,
        datagram: bool,
    ) -> Result<Stream, Error> {
        // SAFETY: the cycle's log is valid for the worker's life; the copy shares its file and
        // chain, which belong to the cycle too.
        let mut log = unsafe { *ngx_cycle_log().as_ptr() };
        log.handler = Some(log_handler);
        log.action = ptr::null_mut();
        // SAFETY: all-zero is the initial state nginx expects of a peer connection (null
        // pointers, zero counts and flags); the fields it needs are set below.
        let mut pc: ngx_peer_connection_t = unsafe { mem::zeroed() };
        pc.socklen = peer.socklen;
        pc.get = Some(ngx_event_get_peer);
        pc.set_log_error(ngx_connection_log_error_e_NGX_ERROR_INFO);
        pc.tries = 1;
        if datagram {
            pc.type_ = nginx_sys::__socket_type_SOCK_DGRAM as core::ffi::c_int;
        }
        // `name` points into this heap buffer, which stays put when the Box moves.
        let name_bytes = peer.name.clone();
        let shared = Rc::new(Shared {
            pc: UnsafeCell::new(pc),
            log: UnsafeCell::new(log),
            sockaddr: UnsafeCell::new(peer.sockaddr),
            name: UnsafeCell::new(ngx_str_t {
                len: name_bytes.len(),
                data: name_bytes.as_ptr().cast_mut(),
            }),
            name_bytes,
            action,
            reader: Cell::new(None),
            writer: Cell::new(None),
            failure: Cell::new(None),
        });
        let data = Rc::as_ptr(&shared).cast_mut().cast::<c_void>();
        // SAFETY: nothing references these cells yet; the pointers point into the Rc allocation,
        // which does not move and outlives the connection (Stream closes it before letting go).
        unsafe {
            (*shared.log.get()).data = data;
            let pc = &mut *shared.pc.get();
            pc.sockaddr = shared.sockaddr.get().cast();
            pc.name = shared.name.get();
            pc.log = shared.log.get();
        }

        // SAFETY: the peer connection is fully initialised above.
        let rc = unsafe { ngx_event_connect_peer(shared.pc.get()) };
        if rc == NGX_DECLINED as ngx_int_t {
            // nginx logged the failure and closed the socket; errno is still connect()'s.
            let errno = ngx_socket_errno();
            return Err(if errno == ECONNREFUSED as i32 {
                Error::Refused
            } else {
                Error::Connect(errno)
            });
        }
        if rc != NGX_OK as ngx_int_t && rc != NGX_AGAIN as ngx_int_t {
            // No free connection, no socket, or an event-module failure (nginx logged which).
            return Err(Error::NoConnection);
        }

        let c = shared.connection();
        // SAFETY: on NGX_OK and NGX_AGAIN, pc->connection is the new connection, exclusively
        // ours; its events were zeroed by ngx_get_connection and point back at it.
        unsafe {
            (*c).data = data;
            (*c).set_idle(1);
            (*(*c).read).handler = Some(on_read);
            (*(*c).write).handler = Some(on_write);
            (*(*c).log).connection = (*c).number;
        }
        let stream = Stream { shared };
        if rc == NGX_AGAIN as ngx_int_t {
            poll_fn(|cx| stream.poll_connected(cx)).await?;
        }
        Ok(stream)
    }

    /// The state read back after a failed exchange.
    pub fn shared(&self) -> Rc<Shared> {
        Rc::clone(&self.shared)
    }

    /// The open connection, or the reason there is none.
    fn connection(&self) -> io::Result<*mut ngx_connection_t> {
        let c = self.shared.connection();
        if c.is_null() {
            let f = self.shared.failure.get().unwrap_or(Failure::Exiting);
            return Err(io_error(f));
        }
        Ok(c)
    }

    fn fail(&self, f: Failure) -> io::Error {
        self.shared.failure.set(Some(f));
        io_error(f)
    }

    /// Completes a non-blocking connect: waits for an event, then asks the socket how the
    /// connect ended.
    fn poll_connected(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let c = match self.connection() {
            Ok(c) => c,
            Err(_) => return Poll::Ready(Err(self.error())),
        };
        // SAFETY: `c` is our open connection; its events are valid while it is open.
        let (rev, wev) = unsafe { ((*c).read, (*c).write) };
        // SAFETY: `rev` and `wev` are `c`'s own events, which live as long as the open connection;
        // only their flags are read.
        if unsafe { (*wev).ready() == 0 && (*rev).ready() == 0 } {
            self.shared.reader.set(Some(cx.waker().clone()));
            self.shared.writer.set(Some(cx.waker().clone()));
            return Poll::Pending;
        }
        let mut err: i32 = 0;
        let mut len = mem::size_of::<i32>() as socklen_t;
        // SAFETY: `c->fd` is our open socket; `err` and `len` are valid out-parameters of the
        // sizes passed.
        let rc = unsafe {
            nginx_sys::getsockopt(
                (*c).fd,
                SOL_SOCKET as i32,
                SO_ERROR as i32,
                ptr::addr_of_mut!(err).cast(),
                &mut len,
            )
        };
        if rc == -1 {
            err = ngx_socket_errno();
        }
        if err == 0 {
            return Poll::Ready(Ok(()));
        }
        // SAFETY: `c` is open; the message is a NUL-terminated static. Logged like nginx's
        // upstream does, at the level log_error selects (info).
        unsafe {
            nginx_sys::ngx_connection_error(c, err, c"connect() failed".as_ptr().cast_mut());
        }
        self.shared.close();
        if err == ECONNREFUSED as i32 {
            self.shared.failure.set(Some(Failure::Refused));
            return Poll::Ready(Err(Error::Refused));
        }
        self.shared.failure.set(Some(Failure::Os(err)));
        Poll::Ready(Err(Error::Connect(err)))
    }

    /// The error to report for a connection that is gone.
    fn error(&self) -> Error {
        self.shared.failure.get().unwrap_or(Failure::Exiting).into()
    }

    /// The open connection, for the TLS layer.
    #[cfg(ngx_ssl)]
    pub fn raw(&self) -> Result<*mut ngx_connection_t, Error> {
        self.connection().map_err(|_| self.error())
    }

    /// Parks the task until the next read event (and write event, for TLS handshakes that
    /// may wait on either).
    #[cfg(ngx_ssl)]
    pub fn wait_any(&self, cx: &mut Context<'_>) {
        self.shared.reader.set(Some(cx.waker().clone()));
        self.shared.writer.set(Some(cx.waker().clone()));
    }

    /// Puts our handlers back after nginx's SSL code replaced them with its own.
    ///
    /// # Safety
    /// `c` must be this stream's open connection.
    #[cfg(ngx_ssl)]
    pub unsafe fn restore_handlers(c: *mut ngx_connection_t) {
        // SAFETY: the caller passes our open connection.
        unsafe {
            (*(*c).read).handler = Some(on_read);
            (*(*c).write).handler = Some(on_write);
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.shared.close();
        // Wakers hold the task; drop them with the connection.
        drop(self.shared.take_wakers());
    }
}

fn io_error(f: Failure) -> io::Error {
    match f {
        Failure::Refused => io::ErrorKind::ConnectionRefused.into(),
        Failure::Reset => io::ErrorKind::ConnectionReset.into(),
        Failure::Exiting => io::ErrorKind::ConnectionAborted.into(),
        Failure::Os(errno) => io::Error::from_raw_os_error(errno),
    }
}

/// Classifies the errno of a failed send or recv (a datagram socket's is refused when the
/// peer's port had nothing on it).
fn failure_of(errno: i32) -> Failure {
    if errno == ECONNREFUSED as i32 {
        Failure::Refused
    } else if errno == ECONNRESET as i32 || errno == EPIPE as i32 {
        Failure::Reset
    } else {
        Failure::Os(errno)
    }
}

impl Stream {
    /// Sends all of `buf`.
    pub async fn send_all(&self, mut buf: &[u8]) -> Result<(), Error> {
        while !buf.is_empty() {
            match poll_fn(|cx| self.poll_send(cx, buf)).await {
                Ok(0) => return Err(Error::Closed),
                Ok(n) => buf = &buf[n..],
                Err(_) => return Err(self.error()),
            }
        }
        Ok(())
    }

    /// Reads into `dst` what the server sent next; 0 at the end of the stream.
    pub async fn recv(&self, dst: &mut [u8]) -> Result<usize, Error> {
        // SAFETY: initialised bytes are valid `MaybeUninit<u8>`s; `poll_recv` only writes.
        let dst = unsafe { &mut *(core::ptr::from_mut(dst) as *mut [mem::MaybeUninit<u8>]) };
        poll_fn(|cx| self.poll_recv(cx, dst))
            .await
            .map_err(|_| self.error())
    }

    /// Reads into `dst` what the socket has: `Ready(Ok(0))` at the end of the stream.
    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        dst: &mut [mem::MaybeUninit<u8>],
    ) -> Poll<io::Result<usize>> {
        let c = self.connection()?;
        if dst.is_empty() {
            return Poll::Ready(Ok(0));
        }
        // SAFETY: `dst` is `dst.len()` writable bytes; `recv` (set by nginx on every
        // connection) writes at most that many and returns how many it wrote.
        let n = unsafe {
            match (*c).recv {
                Some(recv) => recv(c, dst.as_mut_ptr().cast(), dst.len()),
                None => NGX_ERROR as isize,
            }
        };
        if n >= 0 {
            // 0 is the end of stream: the protocol decides whether what came was complete.
            return Poll::Ready(Ok(n as usize));
        }
        if n == NGX_AGAIN as isize {
            self.shared.reader.set(Some(cx.waker().clone()));
            // SAFETY: `c` is open; arms the read event for level-triggered event methods (a
            // no-op with epoll's edge-triggered events, registered at connect).
            if unsafe { ngx_handle_read_event((*c).read, 0) } != NGX_OK as ngx_int_t {
                return Poll::Ready(Err(self.fail(Failure::Os(ngx_socket_errno()))));
            }
            return Poll::Pending;
        }
        // nginx logged it (at info level for resets, see `log_error`).
        Poll::Ready(Err(self.fail(failure_of(ngx_socket_errno()))))
    }

    /// Writes what the socket takes of `buf`.
    fn poll_send(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let c = self.connection()?;
        // SAFETY: `send` (ngx_unix_send or ngx_ssl_write) only reads `buf.len()` bytes of the
        // live slice.
        let n = unsafe {
            match (*c).send {
                Some(send) => send(c, buf.as_ptr().cast_mut(), buf.len()),
                None => NGX_ERROR as isize,
            }
        };
        if n >= 0 {
            return Poll::Ready(Ok(n as usize));
        }
        if n == NGX_AGAIN as isize {
            self.shared.writer.set(Some(cx.waker().clone()));
            // SAFETY: `c` is open; arms the write event for level-triggered event methods.
            if unsafe { ngx_handle_write_event((*c).write, 0) } != NGX_OK as ngx_int_t {
                return Poll::Ready(Err(self.fail(Failure::Os(ngx_socket_errno()))));
            }
            return Poll::Pending;
        }
        Poll::Ready(Err(self.fail(failure_of(ngx_socket_errno()))))
    }
}

// hyper's HTTP/1 client reads and writes through these.
impl hyper::rt::Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // SAFETY: only the cursor's unfilled part is written, and `advance` counts exactly the
        // bytes `recv` initialised there.
        unsafe {
            let n = match self.poll_recv(cx, buf.as_mut()) {
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            buf.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_send(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Nothing is buffered here: `send` writes to the socket (or to OpenSSL, which flushes).
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // One request per connection: dropping the stream closes it.
        Poll::Ready(Ok(()))
    }
}

// h2 (the gRPC health probe's HTTP/2) reads and writes through these.
impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // SAFETY: only the unfilled part is written, and `assume_init` and `advance` count
        // exactly the bytes `recv` initialised there.
        unsafe {
            let n = match self.poll_recv(cx, buf.unfilled_mut()) {
                Poll::Ready(Ok(n)) => n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            buf.assume_init(n);
            buf.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_send(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The read event handler: wakes the reader, or closes the connection when nginx asks
/// (`c->close` set during a graceful shutdown).
unsafe extern "C" fn on_read(ev: *mut ngx_event_t) {
    // SAFETY: nginx calls this with one of our connection's events; `ev->data` is the
    // connection and `c->data` our Shared, alive while the connection is open.
    let (c, shared) = unsafe {
        let c = (*ev).data.cast::<ngx_connection_t>();
        (c, &*(*c).data.cast::<Shared>())
    };
    // SAFETY: `c` is open (nginx does not call handlers of closed connections).
    if unsafe { (*c).close() } != 0 {
        shared.failure.set(Some(Failure::Exiting));
        shared.close();
        let (r, w) = shared.take_wakers();
        wake(r);
        wake(w);
        return;
    }
    match shared.reader.take() {
        Some(waker) => waker.wake(),
        // SAFETY: `ev` is our open connection's read event. Nobody reads: keep a
        // level-triggered event method from reporting it again.
        None => unsafe {
            ngx_handle_read_event(ev, 0);
        },
    }
}

/// The write event handler: wakes the writer.
unsafe extern "C" fn on_write(ev: *mut ngx_event_t) {
    // SAFETY: nginx calls this with our connection's write event; `ev->data` is the connection and
    // `c->data` our `Shared`, alive while the connection is open.
    let shared = unsafe {
        let c = (*ev).data.cast::<ngx_connection_t>();
        &*(*c).data.cast::<Shared>()
    };
    match shared.writer.take() {
        Some(waker) => waker.wake(),
        // SAFETY: `ev` is our open connection's write event.
        None => unsafe {
            ngx_handle_write_event(ev, 0);
        },
    }
}

fn wake(w: Option<Waker>) {
    if let Some(w) = w {
        w.wake();
    }
}

/// Appends " while <action>, server: <name>" to the connection's error lines, as nginx's own
/// handlers add context.
unsafe extern "C" fn log_handler(log: *mut ngx_log_t, buf: *mut u8, len: usize) -> *mut u8 {
    // SAFETY: nginx calls this with our log, whose data is our Shared (alive while the log is
    // in use: the connection closes before Shared is freed).
    let shared = unsafe { &*(*log).data.cast::<Shared>() };
    let name = &*shared.name_bytes;
    let parts: [&[u8]; 4] = [b" while ", shared.action.as_bytes(), b", server: ", name];
    let mut p = buf;
    let mut left = len;
    for part in parts {
        let n = part.len().min(left);
        // SAFETY: nginx passes `len` writable bytes at `buf`; at most `left` of them remain.
        unsafe {
            ptr::copy_nonoverlapping(part.as_ptr(), p, n);
            p = p.add(n);
        }
        left -= n;
    }
    p
}

#[cfg(ngx_ssl)]
/// Frees a connection's TLS state before it closes, without waiting for (or sending) a
/// close_notify: a one-shot exchange framed by HTTP has nothing left to protect, and a
/// shutdown that waited would outlive the connection.
fn shutdown_tls(c: *mut ngx_connection_t) {
    // SAFETY: `c` is an open connection; `c->ssl`, when set, is its live TLS state.
    unsafe {
        let ssl = (*c).ssl;
        if ssl.is_null() {
            return;
        }
        (*ssl).set_no_wait_shutdown(1);
        (*ssl).set_no_send_shutdown(1);
        // With both flags set the shutdown is quiet: it completes at once and frees the SSL.
        nginx_sys::ngx_ssl_shutdown(c);
    }
}
