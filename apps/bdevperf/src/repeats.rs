//! Repeated log lines, said once: a job whose every task fails the same way
//! (a write workload on a read-only bdev fails once per queue slot) logs
//! the error once and then how many times it repeated, not one line per
//! task.

/// What to do with a message given to [`Repeats::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Log it; before it, say that the previous message repeated this many
    /// more times (when above 0).
    Log {
        /// Unlogged repeats of the message before this one.
        previous_repeats: u64,
    },
    /// The same as the last logged message: counted, not logged.
    Repeat,
}

/// The last logged message and how often it came again since.
#[derive(Debug, Clone, Default)]
pub struct Repeats {
    last: Option<String>,
    repeats: u64,
}

impl Repeats {
    /// Decides about `msg`: logged when it differs from the last one.
    pub fn check(&mut self, msg: &str) -> Verdict {
        if self.last.as_deref() == Some(msg) {
            self.repeats += 1;
            return Verdict::Repeat;
        }
        self.last = Some(msg.to_string());
        Verdict::Log {
            previous_repeats: std::mem::take(&mut self.repeats),
        }
    }

    /// The repeats of the last message not yet reported (then zero).
    pub fn take_repeats(&mut self) -> u64 {
        std::mem::take(&mut self.repeats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_message_is_counted_other_is_logged() {
        let mut r = Repeats::default();
        assert_eq!(
            r.check("a"),
            Verdict::Log {
                previous_repeats: 0
            }
        );
        assert_eq!(r.check("a"), Verdict::Repeat);
        assert_eq!(r.check("a"), Verdict::Repeat);
        assert_eq!(
            r.check("b"),
            Verdict::Log {
                previous_repeats: 2
            }
        );
        assert_eq!(r.check("b"), Verdict::Repeat);
        assert_eq!(r.take_repeats(), 1);
        assert_eq!(r.take_repeats(), 0);
        // After the summary the same message still counts as a repeat.
        assert_eq!(r.check("b"), Verdict::Repeat);
        assert_eq!(r.take_repeats(), 1);
    }
}
