//! The reload's account of the breakers whose parameters changed, bounded for configurations
//! of thousands: each named with its state, an incident (open, half-open, forced open, or its
//! state lost) at `warn` and first, a closed one at `notice`, up to [`NAMED`] lines in all;
//! then one line for the zone that counts them all, at `warn` when it counts incidents left
//! unnamed. A reload logs at most `NAMED + 1` lines of them.

use super::state::Retuned;

/// Breakers named one by one per reload.
pub const NAMED: usize = 32;

/// One line of the reload's log: at `warn` (else `notice`), and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// At `warn`, else at `notice`.
    pub warn: bool,
    /// The text, e.g. `circuit breaker "api/default": parameters changed on reload, closed,
    /// window kept`.
    pub text: String,
}

#[derive(Debug)]
struct Named {
    who: String,
    what: Option<Retuned>,
}

/// The breakers a reload retuned: counted, the first of each kind named.
#[derive(Default, Debug)]
pub struct Retunes {
    /// Breakers whose parameters changed.
    pub count: usize,
    /// Of which turning requests away, or would: open, half-open, forced open, or lost.
    pub incidents: usize,
    incident_lines: Vec<Named>,
    calm_lines: Vec<Named>,
}

impl Retunes {
    /// Whether the next breaker may still be named (naming costs an allocation: not for the
    /// thousandth).
    pub fn wants_name(&self) -> bool {
        self.incident_lines.len() < NAMED || self.calm_lines.len() < NAMED
    }

    /// Counts a retuned breaker, named `who` (as the log names it: `"api/default"`) if
    /// [`Retunes::wants_name`] said so; `what` is `None` when its state was lost (the zone too
    /// full to lay it out for a new window length).
    pub fn note(&mut self, who: Option<String>, what: Option<Retuned>) {
        self.count += 1;
        let incident = what.map_or(true, |r| r.is_incident());
        self.incidents += usize::from(incident);
        let lines = if incident {
            &mut self.incident_lines
        } else {
            &mut self.calm_lines
        };
        if let Some(who) = who {
            if lines.len() < NAMED {
                lines.push(Named { who, what });
            }
        }
    }

    fn named(&self) -> impl Iterator<Item = &Named> {
        let calm = NAMED.saturating_sub(self.incident_lines.len());
        self.incident_lines
            .iter()
            .chain(self.calm_lines.iter().take(calm))
    }

    /// The lines naming breakers, incidents first, at most [`NAMED`].
    pub fn lines(&self) -> Vec<Line> {
        self.named()
            .map(|n| match n.what {
                Some(what) => Line {
                    warn: what.is_incident(),
                    text: format!("circuit breaker {}: {}", n.who, what.describe()),
                },
                None => Line {
                    warn: true,
                    text: format!(
                        "circuit breaker {}: parameters changed on reload, its state lost: the \
                         zone is full, it starts afresh on its next request",
                        n.who
                    ),
                },
            })
            .collect()
    }

    /// The zone's line, counting the breakers `dropped` too; `None` when the reload changed
    /// no breaker.
    pub fn summary(&self, zone: &str, dropped: usize) -> Option<Line> {
        if dropped + self.count == 0 {
            return None;
        }
        let named = self.named().count();
        let named_incidents = self.incident_lines.len();
        let unnamed_incidents = self.incidents - named_incidents;
        let more = match self.count - named {
            0 => String::new(),
            n => format!(
                ", {n} of them not named here ({unnamed_incidents} open, half-open or forced open)"
            ),
        };
        Some(Line {
            warn: unnamed_incidents > 0,
            text: format!(
                "circuit breaker zone \"{zone}\": {dropped} breaker(s) dropped, {} retuned by the \
                 new configuration{more}",
                self.count
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::State;

    fn retuned(state: State) -> Retuned {
        Retuned {
            state,
            forced: None,
            dry_run: false,
            window_kept: true,
            cooldown_cut: false,
        }
    }

    #[test]
    fn a_few_are_each_named_and_counted() {
        let mut r = Retunes::default();
        r.note(Some("\"a/default\"".into()), Some(retuned(State::Closed)));
        r.note(Some("\"b/default\"".into()), Some(retuned(State::Open)));
        let lines = r.lines();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].warn, "the open one first, at warn");
        assert_eq!(
            lines[0].text,
            "circuit breaker \"b/default\": parameters changed on reload while open, kept open \
             until its probe, window kept"
        );
        assert!(!lines[1].warn);
        let s = r.summary("cb", 1).unwrap();
        assert!(!s.warn);
        assert_eq!(
            s.text,
            "circuit breaker zone \"cb\": 1 breaker(s) dropped, 2 retuned by the new configuration"
        );
        assert_eq!(Retunes::default().summary("cb", 0), None);
    }

    #[test]
    fn thousands_are_bounded_incidents_first() {
        let mut r = Retunes::default();
        for i in 0..5000 {
            let state = if i % 100 == 0 {
                State::Open
            } else {
                State::Closed
            };
            let who = r.wants_name().then(|| format!("\"u{i}/default\""));
            r.note(who, Some(retuned(state)));
        }
        r.note(Some("\"lost/default\"".into()), None);
        let lines = r.lines();
        assert_eq!(lines.len(), NAMED);
        assert_eq!(lines.iter().filter(|l| l.warn).count(), 32, "all incidents");
        assert!(lines.iter().all(|l| l.warn));
        let s = r.summary("cb", 0).unwrap();
        assert!(s.warn, "incidents left unnamed");
        assert_eq!(
            s.text,
            "circuit breaker zone \"cb\": 0 breaker(s) dropped, 5001 retuned by the new \
             configuration, 4969 of them not named here (19 open, half-open or forced open)"
        );
    }
}
