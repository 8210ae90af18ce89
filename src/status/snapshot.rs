//! The status page's one step under the zone lock: the breakers copied out as they are now (in
//! batches, see `Zone::visit`), and nothing more, so that ordering, grouping and formatting
//! happen after the lock is let go.

use circuit_breaker_core::snapshot::{BreakerView, State};
use circuit_breaker_core::status::assemble::{Record, Snapshot};
use circuit_breaker_core::status::KeysView;

use circuit_breaker_shell::zone::{Kind, Zone};

/// Every breaker of `zone` that `keep` keeps (given its upstream, route, kind and figures; a
/// key's first by `keep_key`, by its figures alone), at `mono`
/// (with its history if `history`), and the zone's figures.
pub fn snapshot(
    zone: &Zone,
    mono: u64,
    history: bool,
    keep: impl Fn(&str, &str, Kind, &BreakerView) -> bool,
    keep_key: impl Fn(&BreakerView) -> bool,
) -> Snapshot {
    // Room for them all at once: a record is some 500 bytes, and moving ten thousand at each
    // doubling showed in a poll's instructions.
    let mut records = Vec::with_capacity(zone.breakers());
    let mut open_keys = 0;
    let mut copy = |e: circuit_breaker_shell::zone::Entry<'_>| {
        if e.kind == Kind::Keyed && e.view.state != State::Closed {
            open_keys += 1;
        }
        // Most keys are closed, and not listed: left before their names are made.
        if e.kind == Kind::Keyed && !keep_key(&e.view) {
            return;
        }
        // A key's bytes are a client's: written so that they read back to the very bytes
        // (control names a key so).
        let route = match e.kind {
            Kind::Keyed => {
                std::borrow::Cow::Owned(circuit_breaker_core::keyed::name::shown(e.route))
            }
            _ => String::from_utf8_lossy(e.route),
        };
        let upstream = String::from_utf8_lossy(e.upstream);
        if !keep(&upstream, &route, e.kind, &e.view) {
            return;
        }
        records.push(Record {
            upstream: upstream.into_owned(),
            route: route.into_owned(),
            kind: e.kind,
            view: e.view,
            retry: e.retry,
            limit: e.limit,
        });
    };
    let (used, size, alloc_failures) = zone.visit(mono, history, &mut copy);
    let keys = zone
        .visit_keyed(mono, history, &mut copy)
        .map(|k| KeysView {
            used: k.keys,
            capacity: k.capacity,
            promoted: k.promoted,
            ..KeysView::default()
        });
    let keys = keys.map(|k| KeysView {
        open: open_keys,
        ..k
    });
    Snapshot {
        used,
        size,
        alloc_failures,
        keys,
        records,
    }
}
