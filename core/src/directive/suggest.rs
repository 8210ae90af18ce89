//! "Did you mean": the closest of a list of names to a misspelled word, when it is close
//! enough that the suggestion helps rather than puzzles.

/// Edits between `a` and `b` (insert, delete, substitute, or swap two neighbours: the
/// optimal string alignment distance), counted in bytes; names are ASCII.
pub fn distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // Three rows: the one before last is needed for a swap.
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(prev2[j - 2] + 1);
            }
            cur[j] = d;
        }
        core::mem::swap(&mut prev2, &mut prev);
        core::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The edits a word of `len` bytes may be off by and still be suggested: one for a short
/// name (where two edits reach unrelated names), two up to eight bytes, three beyond.
fn tolerance(len: usize) -> usize {
    match len {
        0..=4 => 1,
        5..=8 => 2,
        _ => 3,
    }
}

/// The name of `names` closest to `word`, if close enough and closer than any other
/// (a tie suggests nothing: either could be meant).
pub fn suggest<'a>(word: &str, names: &[&'a str]) -> Option<&'a str> {
    let mut best: Option<(&'a str, usize)> = None;
    let mut tied = false;
    for &name in names {
        let d = distance(word, name);
        match best {
            Some((_, b)) if d > b => {}
            Some((_, b)) if d == b => tied = true,
            _ => {
                best = Some((name, d));
                tied = false;
            }
        }
    }
    let (name, d) = best?;
    if d > 0 && !tied && d <= tolerance(word.len().min(name.len())) {
        return Some(name);
    }
    // The start of one name only (`dry` for `dry_run`).
    let mut starts = names
        .iter()
        .filter(|n| word.len() >= 3 && n.len() > word.len() && n.starts_with(word));
    match (starts.next(), starts.next()) {
        (Some(n), None) => Some(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(distance("failure_rte", "failure_rate"), 1);
        assert_eq!(
            distance("failrue_rate", "failure_rate"),
            1,
            "a swap is one edit"
        );
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("abc", ""), 3);
        assert_eq!(distance("open", "open"), 0);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggests_only_what_is_close() {
        let names = [
            "window",
            "min_requests",
            "failure_rate",
            "slow",
            "slow_rate",
            "open",
        ];
        assert_eq!(suggest("failure_rte", &names), Some("failure_rate"));
        assert_eq!(suggest("minrequests", &names), Some("min_requests"));
        assert_eq!(suggest("windw", &names), Some("window"));
        assert_eq!(suggest("slo", &names), Some("slow"));
        assert_eq!(suggest("colour", &names), None, "nothing near");
        assert_eq!(suggest("x", &names), None);
        assert_eq!(
            suggest("open", &names),
            None,
            "the name itself is no suggestion"
        );
        // "slow_rat" is one from "slow_rate" and four from "slow".
        assert_eq!(suggest("slow_rat", &names), Some("slow_rate"));
        assert_eq!(suggest("ab", &["ac", "ad"]), None, "a tie suggests nothing");
        assert_eq!(
            suggest("dry", &["dry_run", "open"]),
            Some("dry_run"),
            "a start"
        );
        assert_eq!(suggest("slo", &["slow", "slow_rate"]), Some("slow"));
        assert_eq!(
            suggest("prob", &["probe_uri", "probe_host"]),
            None,
            "two starts"
        );
    }
}
