//! `--decode-abandoned`: what srv-sim's engine does with a running request whose client went
//! away, so the harm of an engine that keeps decoding abandoned streams can be measured
//! (loadgen's `--cancel-rate`).

/// What the engine does with a running request whose client went away (`--decode-abandoned`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Abandoned {
    /// Dropped at the next step, its slot and KV freed (vLLM aborts on disconnect).
    #[default]
    Stop,
    /// Decoded this many more steps (chunks, in fixed-latency mode) before it is dropped: an
    /// engine that notices late.
    Steps(u32),
    /// Decoded to its end: an engine that never notices.
    ToEnd,
}

impl Abandoned {
    /// `0` (stop at once), a step count, or `end`.
    pub fn parse(s: &str) -> Result<Abandoned, String> {
        match s.trim() {
            "end" => Ok(Abandoned::ToEnd),
            n => match n.parse::<u32>() {
                Ok(0) => Ok(Abandoned::Stop),
                Ok(n) => Ok(Abandoned::Steps(n)),
                Err(_) => Err(format!(
                    "'{s}': steps to keep decoding an abandoned request (0: stop at once) or end"
                )),
            },
        }
    }
}

impl Abandoned {
    /// Before a step of a request whose client went away, `steps` steps ago: whether to drop
    /// it now; else it runs this step, counted.
    pub fn drop_now(self, steps: &mut u32) -> bool {
        match self {
            Abandoned::Stop => true,
            Abandoned::Steps(n) if *steps >= n => true,
            Abandoned::Steps(_) | Abandoned::ToEnd => {
                *steps += 1;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_abandoned_reads_a_step_count_or_end() {
        assert_eq!(Abandoned::parse("0"), Ok(Abandoned::Stop));
        assert_eq!(Abandoned::parse("3"), Ok(Abandoned::Steps(3)));
        assert_eq!(Abandoned::parse("end"), Ok(Abandoned::ToEnd));
        for bad in ["-1", "x", "1.5", ""] {
            assert!(Abandoned::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_abandoned_request_runs_its_steps_then_is_dropped() {
        let runs = |policy: Abandoned| {
            let mut steps = 0;
            (0..10).take_while(|_| !policy.drop_now(&mut steps)).count()
        };
        assert_eq!(runs(Abandoned::Stop), 0);
        assert_eq!(runs(Abandoned::Steps(3)), 3);
        assert_eq!(runs(Abandoned::ToEnd), 10);
    }
}
