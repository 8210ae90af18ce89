//! Fresh nonces for the fleet's pulls and pokes, from the kernel's random number generator
//! (`getrandom(2)`): unpredictable to anyone, so that no answer can be made before the pull
//! it answers.

use circuit_breaker_core::fleet::auth::{Nonce, NONCE_BYTES};

/// A fresh nonce, or `None` when the kernel gives no randomness (then nothing is sent).
pub fn fresh() -> Option<Nonce> {
    let mut n = [0u8; NONCE_BYTES];
    let mut filled = 0;
    while filled < n.len() {
        let rest = &mut n[filled..];
        // SAFETY: `rest` is `rest.len()` writable bytes; getrandom writes at most that many.
        let got = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if got < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return None;
        }
        filled += got as usize;
    }
    Some(Nonce(n))
}
