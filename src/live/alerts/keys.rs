//! Which live alerts are engaged, from one evaluation to the next, with hysteresis: a key
//! raised by an evaluation engages at once, is sent again only after `suppress`, and is
//! released only once no evaluation has raised it for `release_after` (an alert hovering at
//! its threshold, raised by every other evaluation, stays engaged instead of flapping).

use std::collections::BTreeMap;

/// What one evaluation changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// Send `engaged` for the key raised by the evaluation's alert of this index (new, or
    /// still raised after `suppress`).
    Engage(usize),
    /// Send `released` for this key.
    Release(String),
}

struct Engaged {
    last_sent_ns: u64,
    last_raised_ns: u64,
}

/// The engaged keys.
#[derive(Default)]
pub(super) struct Keys {
    engaged: BTreeMap<String, Engaged>,
}

impl Keys {
    /// Folds in one evaluation at `now_ns` (a monotonic clock) that raised `raised` (the
    /// alerts' keys, in order).
    pub(super) fn step(
        &mut self,
        now_ns: u64,
        raised: &[String],
        suppress_ns: u64,
        release_after_ns: u64,
    ) -> Vec<Change> {
        let mut out = Vec::new();
        for (i, key) in raised.iter().enumerate() {
            match self.engaged.get_mut(key) {
                Some(e) if e.last_raised_ns == now_ns => {} // the same key twice
                Some(e) => {
                    e.last_raised_ns = now_ns;
                    if now_ns.saturating_sub(e.last_sent_ns) >= suppress_ns {
                        e.last_sent_ns = now_ns;
                        out.push(Change::Engage(i));
                    }
                }
                None => {
                    self.engaged.insert(
                        key.clone(),
                        Engaged {
                            last_sent_ns: now_ns,
                            last_raised_ns: now_ns,
                        },
                    );
                    out.push(Change::Engage(i));
                }
            }
        }
        let gone: Vec<String> = self
            .engaged
            .iter()
            .filter(|(_, e)| {
                e.last_raised_ns != now_ns
                    && now_ns.saturating_sub(e.last_raised_ns) >= release_after_ns
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.engaged.remove(&key);
            out.push(Change::Release(key));
        }
        out
    }

    /// How many keys are engaged.
    pub(super) fn len(&self) -> usize {
        self.engaged.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// The events of evaluations every second, raising `k` where `pattern` has `x`.
    fn run(pattern: &str, release_after_ns: u64) -> Vec<(u64, &'static str)> {
        let mut keys = Keys::default();
        let mut out = Vec::new();
        for (t, c) in pattern.chars().enumerate() {
            let raised = if c == 'x' {
                vec!["tcp_retransmissions|10.0.0.7".to_string()]
            } else {
                Vec::new()
            };
            for ch in keys.step(t as u64 * S, &raised, 3600 * S, release_after_ns) {
                out.push((
                    t as u64,
                    match ch {
                        Change::Engage(_) => "engaged",
                        Change::Release(_) => "released",
                    },
                ));
            }
        }
        out
    }

    #[test]
    fn an_alert_at_its_threshold_engages_once_and_releases_after_the_hold() {
        // A host hovering at the retransmission threshold: raised every other second for
        // 10 s. Without a hold it flapped: engaged/released three times and more.
        let flapping = "x.x.x.x.x.";
        let events = run(flapping, 5 * S);
        assert_eq!(events, [(0, "engaged")], "flapped");
        // Released once it has stayed quiet for the hold: 5 s after its last raise (8 s).
        let events = run(&format!("{flapping}....."), 5 * S);
        assert_eq!(events, [(0, "engaged"), (13, "released")]);
        // Raised again after the release: a new engagement.
        let events = run("x......x", 5 * S);
        assert_eq!(events, [(0, "engaged"), (5, "released"), (7, "engaged")]);
    }

    #[test]
    fn a_key_still_raised_is_sent_again_after_suppress_only() {
        let mut keys = Keys::default();
        let k = vec!["dscp|10.30.0.11".to_string(), "dscp|10.30.0.11".to_string()];
        assert_eq!(keys.step(0, &k, 10 * S, 5 * S), [Change::Engage(0)]);
        assert_eq!(keys.step(5 * S, &k, 10 * S, 5 * S), []);
        assert_eq!(keys.step(10 * S, &k, 10 * S, 5 * S), [Change::Engage(0)]);
        assert_eq!(keys.len(), 1);
        assert_eq!(
            keys.step(15 * S, &[], 10 * S, 5 * S),
            [Change::Release("dscp|10.30.0.11".into())]
        );
        assert_eq!(keys.len(), 0);
    }
}
