//! The status page's breakers put together from what the zone walk copied out, after the lock
//! is let go: the query's selection, instants on the wall clock, configuration order, each
//! upstream's servers under its own breaker, and what the configuration adds to a breaker.

use std::collections::HashMap;

use super::query::{lists_key, matches, Query, KEY_LIMIT};
use super::{Entry, LimitStatus, ServerEntry, ZoneView, DEFAULT_ROUTE};
use crate::retry_budget::RetryBudgetView;
use crate::snapshot::{BreakerView, Clocks, Kind, State};

/// One breaker as the zone walk copied it, under the lock.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// The upstream's name.
    pub upstream: String,
    /// The route's name, or the server's address for [`Kind::Server`].
    pub route: String,
    /// What the breaker judges.
    pub kind: Kind,
    /// Its figures, on the monotonic clock.
    pub view: BreakerView,
    /// The upstream's retry budget, on an upstream's own breaker.
    pub retry: Option<RetryBudgetView>,
    /// The adaptive limit, when the breaker has one.
    pub limit: Option<LimitStatus>,
}

/// What one zone walk copied: the zone's figures and every breaker, in the zone's order
/// (newest first: the zone links a new breaker at the head).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Bytes allocated from the zone.
    pub used: u64,
    /// The zone's size in bytes.
    pub size: u64,
    /// Breakers not created for lack of memory.
    pub alloc_failures: u64,
    /// The table of keys, when the zone has one.
    pub keys: Option<super::KeysView>,
    /// The breakers.
    pub records: Vec<Record>,
}

/// What the configuration says of an upstream, as far as the page shows it.
pub trait Upstreams {
    /// The upstream's servers in configuration order, each with its `backup` flag; none for
    /// an upstream the configuration does not know.
    fn servers(&self, upstream: &str) -> impl Iterator<Item = (&str, bool)>;
    /// What its breakers' active probes request, if it has `probe_uri`.
    fn probe_uri(&self, upstream: &str) -> Option<String>;
    /// Its breakers' fingerprint, when the instance is in a fleet.
    fn fingerprint(&self, upstream: &str) -> Option<u64>;
}

/// Whether `q` selects the breaker of `upstream` and `route` (a server's address for
/// [`Kind::Server`]): a server counts as its upstream's own breaker (`route=default`).
pub fn selects(q: &Query, upstream: &str, route: &str, kind: Kind) -> bool {
    if kind == Kind::Keyed {
        // A key is given as the page writes it, or as it is.
        return q.upstream.iter().all(|u| u == upstream)
            && q.route
                .as_ref()
                .map_or(true, |_| q.route_key.as_deref() == Some(route));
    }
    let own = kind == Kind::Server || (kind == Kind::Route && route == DEFAULT_ROUTE);
    matches(q, upstream, if own { DEFAULT_ROUTE } else { route })
}

/// Whether the zone walk copies this breaker for `q`: [`selects`], and for a keyed one
/// [`lists_key`] too (they may be many; `key_limit` is applied once they are sorted).
pub fn copies(q: &Query, upstream: &str, route: &str, kind: Kind, view: &BreakerView) -> bool {
    selects(q, upstream, route, kind)
        && (kind != Kind::Keyed || lists_key(q, route, view.state, view.forced.is_some()))
}

/// The page's zone view and breakers, as [`super::render_json`] and
/// [`super::render_prometheus`] take them. `head` is the page's top as the location knows it
/// (name, versions, `control`); the zone's figures come from `snapshot`. The breakers are those
/// `q` selects, a server counting as its upstream's own breaker (`route=default`), in
/// configuration order (the zone's, reversed); each upstream's own breaker carries the servers
/// the configuration lists, in its order. A server the configuration no longer lists, or whose
/// upstream's own breaker is not shown, is left out.
pub fn assemble(
    head: ZoneView,
    snapshot: Snapshot,
    q: &Query,
    clocks: Clocks,
    conf: &impl Upstreams,
) -> (ZoneView, Vec<Entry>) {
    let zone = ZoneView {
        used: snapshot.used,
        size: snapshot.size,
        alloc_failures: snapshot.alloc_failures,
        keys: snapshot.keys,
        ..head
    };
    let mut entries = Vec::with_capacity(snapshot.records.len());
    let mut keyed = Vec::new();
    let mut servers: HashMap<String, HashMap<String, BreakerView>> = HashMap::new();
    // Oldest first is configuration order (the zone links a new breaker at the head).
    for mut r in snapshot.records.into_iter().rev() {
        if !selects(q, &r.upstream, &r.route, r.kind) {
            continue;
        }
        if r.kind == Kind::Keyed {
            if lists_key(q, &r.route, r.view.state, r.view.forced.is_some()) {
                keyed.push(r);
            }
            continue;
        }
        r.view.on_wall_clock(clocks.mono_ms, clocks.wall_ms);
        if r.kind == Kind::Server {
            servers
                .entry(r.upstream)
                .or_default()
                .insert(r.route, r.view);
            continue;
        }
        let (probe_uri, fingerprint) = (conf.probe_uri(&r.upstream), conf.fingerprint(&r.upstream));
        entries.push(entry(r, probe_uri, fingerprint));
    }
    for e in entries.iter_mut().filter(|e| e.route == DEFAULT_ROUTE) {
        let Some(mut recorded) = servers.remove(&e.upstream) else {
            continue;
        };
        for (address, backup) in conf.servers(&e.upstream) {
            if let Some(view) = recorded.remove(address) {
                e.servers.push(ServerEntry {
                    address: address.to_owned(),
                    backup,
                    view,
                });
            }
        }
    }
    let listed = list_keyed(&mut entries, keyed, q, clocks);
    let zone = ZoneView {
        keys: zone.keys.map(|k| super::KeysView {
            listed,
            unlisted: k.promoted.saturating_sub(listed),
            ..k
        }),
        ..zone
    };
    (zone, entries)
}

/// Appends to `entries` the first `key_limit` of the keyed breakers `q` lists: open first,
/// then half-open, then closed, each newest state first. Returns how many.
fn list_keyed(entries: &mut Vec<Entry>, mut keyed: Vec<Record>, q: &Query, clocks: Clocks) -> u64 {
    let rank = |s: State| match s {
        State::Open => 0,
        State::HalfOpen => 1,
        State::Closed => 2,
    };
    keyed.sort_by(|a, b| {
        rank(a.view.state)
            .cmp(&rank(b.view.state))
            .then(b.view.since_ms.cmp(&a.view.since_ms))
            .then_with(|| a.route.cmp(&b.route))
    });
    keyed.truncate(q.key_limit.unwrap_or(KEY_LIMIT));
    let listed = keyed.len() as u64;
    entries.extend(keyed.into_iter().map(|mut r| {
        r.view.on_wall_clock(clocks.mono_ms, clocks.wall_ms);
        entry(r, None, None)
    }));
    listed
}

/// A record as the page shows it, without servers yet.
fn entry(r: Record, probe_uri: Option<String>, fingerprint: Option<u64>) -> Entry {
    Entry {
        probe_uri,
        fingerprint,
        upstream: r.upstream,
        route: r.route,
        view: r.view,
        servers: Vec::new(),
        retry: r.retry,
        limit: r.limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::query::parse_query;
    use crate::status::tests::closed_entry;

    const CLOCKS: Clocks = Clocks {
        mono_ms: 50_000,
        wall_ms: 1_764_484_800_000,
    };

    /// Two upstreams: `api` with two servers and a backup, `web` with one, and what their
    /// breakers add.
    struct Conf;

    impl Upstreams for Conf {
        fn servers(&self, upstream: &str) -> impl Iterator<Item = (&str, bool)> {
            let servers: &[(&str, bool)] = match upstream {
                "api" => &[
                    ("10.0.0.2:80", false),
                    ("10.0.0.1:80", false),
                    ("10.0.0.9:80", true),
                ],
                "web" => &[("10.0.1.1:80", false)],
                _ => &[],
            };
            servers.iter().copied()
        }
        fn probe_uri(&self, upstream: &str) -> Option<String> {
            (upstream == "api").then(|| "/health".to_owned())
        }
        fn fingerprint(&self, upstream: &str) -> Option<u64> {
            (upstream == "web").then_some(0xfeed)
        }
    }

    /// A breaker whose state began `since` on the monotonic clock.
    fn view(since: u64) -> BreakerView {
        BreakerView {
            since_ms: since,
            ..closed_entry().view
        }
    }

    fn record(upstream: &str, route: &str, kind: Kind) -> Record {
        Record {
            upstream: upstream.into(),
            route: route.into(),
            kind,
            view: view(40_000),
            retry: None,
            limit: None,
        }
    }

    fn breaker(upstream: &str, route: &str) -> Record {
        record(upstream, route, Kind::Route)
    }

    fn server(upstream: &str, address: &str) -> Record {
        record(upstream, address, Kind::Server)
    }

    /// Every kind of record, in the zone's order (newest first).
    fn records() -> Vec<Record> {
        vec![
            server("api", "10.0.0.9:80"),
            breaker("web", "default"),
            server("web", "10.0.1.1:80"),
            breaker("api", "checkout"),
            server("api", "10.0.0.1:80"),
            server("api", "10.0.0.2:80"),
            breaker("api", "default"),
        ]
    }

    fn page(args: &str, records: Vec<Record>) -> Vec<Entry> {
        let q = parse_query(args.as_bytes()).unwrap();
        let snapshot = Snapshot {
            records,
            ..Snapshot::default()
        };
        assemble(ZoneView::default(), snapshot, &q, CLOCKS, &Conf).1
    }

    /// Each entry as `upstream/route[server,…]`.
    fn names(entries: &[Entry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| {
                let servers: Vec<&str> = e.servers.iter().map(|s| s.address.as_str()).collect();
                format!("{}/{}[{}]", e.upstream, e.route, servers.join(","))
            })
            .collect()
    }

    /// A keyed breaker of `$tenant` for `key`, in `state` since `since`.
    fn key(key: &str, state: State, since: u64) -> Record {
        Record {
            view: BreakerView {
                state,
                ..view(since)
            },
            ..record("$tenant", key, Kind::Keyed)
        }
    }

    #[test]
    fn keyed_breakers_open_first_newest_first_up_to_the_limit_with_the_rest_counted() {
        let keys = || {
            vec![
                key("c1", State::Closed, 10),
                key("o1", State::Open, 10),
                key("h1", State::HalfOpen, 30),
                key("o2", State::Open, 20),
                key("ac", State::Closed, 40),
                breaker("api", "default"),
            ]
        };
        let run = |args: &str| {
            let q = parse_query(args.as_bytes()).unwrap();
            let snapshot = Snapshot {
                records: keys(),
                keys: Some(crate::status::KeysView {
                    used: 9,
                    capacity: 1024,
                    promoted: 5,
                    ..Default::default()
                }),
                ..Snapshot::default()
            };
            let (zone, entries) = assemble(ZoneView::default(), snapshot, &q, CLOCKS, &Conf);
            let k = zone.keys.unwrap();
            let names = names(&entries)
                .iter()
                .map(|n| n.replace("[]", ""))
                .collect::<Vec<_>>();
            (names, k.listed, k.unlisted)
        };
        let own = "api/default".to_owned();
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            run(""),
            (
                [
                    vec![own.clone()],
                    list(&["$tenant/o2", "$tenant/o1", "$tenant/h1"])
                ]
                .concat(),
                3,
                2
            )
        );
        assert_eq!(
            run("keys=all&key_limit=4"),
            (
                [
                    vec![own.clone()],
                    list(&["$tenant/o2", "$tenant/o1", "$tenant/h1", "$tenant/ac"])
                ]
                .concat(),
                4,
                1
            )
        );
        assert_eq!(
            run("keys=all&key_prefix=c"),
            (vec![own, "$tenant/c1".into()], 1, 4)
        );
        assert_eq!(
            run("upstream=$tenant&key_limit=1"),
            (list(&["$tenant/o2"]), 1, 4)
        );
    }

    #[test]
    fn breakers_in_configuration_order_with_their_servers_in_theirs() {
        assert_eq!(
            names(&page("", records())),
            [
                "api/default[10.0.0.2:80,10.0.0.1:80,10.0.0.9:80]",
                "api/checkout[]",
                "web/default[10.0.1.1:80]",
            ]
        );
        let api = &page("", records())[0];
        let backups: Vec<bool> = api.servers.iter().map(|s| s.backup).collect();
        assert_eq!(backups, [false, false, true]);
    }

    #[test]
    fn the_query_selects_servers_as_their_upstreams_own_breaker() {
        assert_eq!(
            names(&page("upstream=api", records())),
            [
                "api/default[10.0.0.2:80,10.0.0.1:80,10.0.0.9:80]",
                "api/checkout[]"
            ]
        );
        assert_eq!(
            names(&page("route=default", records())),
            [
                "api/default[10.0.0.2:80,10.0.0.1:80,10.0.0.9:80]",
                "web/default[10.0.1.1:80]"
            ]
        );
        assert_eq!(
            names(&page("route=checkout", records())),
            ["api/checkout[]"]
        );
        assert_eq!(
            names(&page("upstream=web&route=default", records())),
            ["web/default[10.0.1.1:80]"]
        );
        // A server's address is no route, whatever it is called.
        assert!(page("route=10.0.0.1:80", records()).is_empty());
        assert!(page("upstream=nope", records()).is_empty());
    }

    #[test]
    fn a_server_is_selected_as_its_upstreams_own_breaker() {
        let own = parse_query(b"route=default").unwrap();
        assert!(selects(&own, "api", "10.0.0.1:80", Kind::Server));
        assert!(selects(&own, "api", "default", Kind::Route));
        assert!(!selects(&own, "api", "checkout", Kind::Route));
        let named = parse_query(b"route=10.0.0.1:80").unwrap();
        assert!(!selects(&named, "api", "10.0.0.1:80", Kind::Server));
        assert!(selects(&named, "api", "10.0.0.1:80", Kind::Route));
        let api = parse_query(b"upstream=api").unwrap();
        assert!(selects(&api, "api", "10.0.0.1:80", Kind::Server));
        assert!(!selects(&api, "web", "10.0.0.1:80", Kind::Server));
    }

    #[test]
    fn servers_without_a_place_are_left_out() {
        let records = vec![
            // No longer in the configuration.
            server("api", "10.0.0.7:80"),
            // A route's breaker has no servers, even one named like a server.
            breaker("api", "10.0.0.1:80"),
            // The upstream's own breaker is not in the zone.
            server("web", "10.0.1.1:80"),
            server("api", "10.0.0.1:80"),
            breaker("api", "default"),
            // An upstream the configuration does not know.
            server("gone", "10.0.2.1:80"),
            breaker("gone", "default"),
        ];
        assert_eq!(
            names(&page("", records)),
            [
                "gone/default[]",
                "api/default[10.0.0.1:80]",
                "api/10.0.0.1:80[]"
            ]
        );
    }

    #[test]
    fn instants_move_to_the_wall_clock() {
        let mut own = breaker("api", "default");
        own.view.retry_at_ms = Some(60_000);
        own.view.episode_ms = Some(30_000);
        let mut s = server("api", "10.0.0.1:80");
        s.view.since_ms = 49_999;
        let entries = page("", vec![s, own]);
        let wall = CLOCKS.wall_ms;
        assert_eq!(entries[0].view.since_ms, wall - 10_000);
        assert_eq!(entries[0].view.retry_at_ms, Some(wall + 10_000));
        assert_eq!(entries[0].view.episode_ms, Some(wall - 20_000));
        assert_eq!(entries[0].servers[0].view.since_ms, wall - 1);
    }

    #[test]
    fn the_configuration_and_the_zone_fill_in_the_rest() {
        let mut own = breaker("api", "default");
        own.retry = Some(RetryBudgetView {
            window_s: 10,
            firsts: 100,
            retries: 3,
            allowance: 20,
            retries_total: 7,
            retries_denied_total: 1,
            firsts_total: 900,
        });
        own.limit = Some(LimitStatus {
            limit: 12,
            in_flight: 3,
            ..LimitStatus::default()
        });
        let snapshot = Snapshot {
            used: 8192,
            size: 1 << 20,
            alloc_failures: 2,
            keys: None,
            records: vec![breaker("web", "default"), own.clone()],
        };
        let head = ZoneView {
            name: "cb".into(),
            module_version: "1.2.3",
            control: true,
            ..ZoneView::default()
        };
        let (zone, entries) = assemble(head, snapshot, &Query::default(), CLOCKS, &Conf);
        assert_eq!(
            zone,
            ZoneView {
                name: "cb".into(),
                module_version: "1.2.3",
                control: true,
                used: 8192,
                size: 1 << 20,
                alloc_failures: 2,
                ..ZoneView::default()
            }
        );
        assert_eq!(entries[0].retry, own.retry);
        assert_eq!(entries[0].limit, own.limit);
        assert_eq!(entries[0].probe_uri.as_deref(), Some("/health"));
        assert_eq!(entries[0].fingerprint, None);
        assert_eq!(entries[1].probe_uri, None);
        assert_eq!(entries[1].fingerprint, Some(0xfeed));
    }

    #[test]
    fn an_empty_zone_is_an_empty_page() {
        let (zone, entries) = assemble(
            ZoneView::default(),
            Snapshot::default(),
            &Query::default(),
            CLOCKS,
            &Conf,
        );
        assert_eq!(zone, ZoneView::default());
        assert!(entries.is_empty());
    }
}
