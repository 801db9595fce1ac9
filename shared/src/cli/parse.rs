//! Parsers for the values tools take on the command line (clap `value_parser`s): labels,
//! durations, lists and doubling ranges, binary sizes.

use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

/// `k=v` with a non-empty key.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got '{s}'")),
    }
}

/// The longest duration any flag takes: beyond it a deadline computed from now could overflow
/// the clock (a panic), and no benchmark waits that long.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// `500ms`, `30s`, `15m`, `1h 30m`; a bare number is seconds. At most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let d = if let Ok(secs) = t.parse::<f64>() {
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(format!("'{s}' is not a duration"));
        }
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    } else {
        humantime::parse_duration(t)
            .map_err(|e| format!("'{s}' is not a duration ({e}); examples: 500ms, 30s, 15m"))?
    };
    if d > MAX_DURATION {
        return Err(format!(
            "'{s}' is longer than a year, the most any duration takes"
        ));
    }
    Ok(d)
}

/// [`parse_duration`] for a limit that cannot be zero (a timeout of 0 fails everything).
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("'{s}': must be more than 0")),
        d => Ok(d),
    }
}

/// `1,2,4,8` or a doubling range `1..256` (1,2,4,...,256; the end is included when reached by
/// doubling, and always included as the last value), or a mix: `1..8,12`.
pub fn parse_list<T>(s: &str) -> Result<Vec<T>, String>
where
    T: FromStr + Copy + PartialOrd + Into<f64> + DoubleStep,
    T::Err: Display,
{
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("empty item in list '{s}'"));
        }
        if let Some((a, b)) = part.split_once("..") {
            let start: T = a
                .trim()
                .parse()
                .map_err(|e| format!("'{a}' in '{part}': {e}"))?;
            let end: T = b
                .trim()
                .parse()
                .map_err(|e| format!("'{b}' in '{part}': {e}"))?;
            if start.into() <= 0.0 || end < start {
                return Err(format!(
                    "range '{part}' must go up from a positive start, e.g. 1..256"
                ));
            }
            let mut x = start;
            while x < end {
                out.push(x);
                x = x.double();
            }
            out.push(end);
        } else {
            out.push(part.parse().map_err(|e| format!("'{part}': {e}"))?);
        }
    }
    Ok(out)
}

/// Doubling for [`parse_list`] ranges.
pub trait DoubleStep {
    fn double(self) -> Self;
}
impl DoubleStep for u32 {
    fn double(self) -> Self {
        self.saturating_mul(2)
    }
}
impl DoubleStep for f64 {
    fn double(self) -> Self {
        self * 2.0
    }
}

/// clap value parser for `Vec<u32>` lists: `value_parser = servbench::cli::u32_list`.
pub fn u32_list(s: &str) -> Result<Vec<u32>, String> {
    parse_list::<u32>(s)
}

/// clap value parser for `Vec<f64>` lists.
pub fn f64_list(s: &str) -> Result<Vec<f64>, String> {
    parse_list::<f64>(s)
}

/// A byte count with an optional binary suffix: `8`, `64K`, `256M`, `1G` (K = 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        Some('T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size; examples: 8, 64K, 256M, 1G"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_doubling_ranges() {
        let cases: &[(&str, &[u32])] = &[
            ("1,2,4,8", &[1, 2, 4, 8]),
            ("1..256", &[1, 2, 4, 8, 16, 32, 64, 128, 256]),
            ("3..20", &[3, 6, 12, 20]),
            ("1..8,12", &[1, 2, 4, 8, 12]),
            ("5", &[5]),
            ("4..4", &[4]),
        ];
        for (input, want) in cases {
            assert_eq!(parse_list::<u32>(input).unwrap(), *want, "{input}");
        }
        for bad in ["", "1,,2", "0..8", "8..1", "a", "1..x"] {
            assert!(parse_list::<u32>(bad).is_err(), "{bad} should fail");
        }
        assert_eq!(parse_list::<f64>("0.5,2.5").unwrap(), vec![0.5, 2.5]);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("2.5").unwrap(), Duration::from_millis(2500));
        assert!(parse_duration("soon").unwrap_err().contains("examples"));
        assert!(parse_duration("-1").is_err());
    }

    /// Huge durations (a bare 1e30, u64::MAX seconds) are refused instead of panicking here
    /// or when a deadline is computed from them; a timeout of 0 is refused.
    #[test]
    fn durations_beyond_a_year_and_zero_timeouts_are_refused() {
        for huge in ["1e30", "18446744073709551615s", "400days"] {
            let e = parse_duration(huge).unwrap_err();
            assert!(e.contains("longer than a year"), "{huge}: {e}");
        }
        assert_eq!(parse_duration("365days").unwrap(), MAX_DURATION);
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert!(
            parse_positive_duration("0s")
                .unwrap_err()
                .contains("more than 0")
        );
        assert!(
            parse_positive_duration("0")
                .unwrap_err()
                .contains("more than 0")
        );
        assert_eq!(
            parse_positive_duration("1ms").unwrap(),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("12Q").is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(
            parse_label("run=base").unwrap(),
            ("run".into(), "base".into())
        );
        assert_eq!(parse_label("k=a=b").unwrap(), ("k".into(), "a=b".into()));
        assert!(parse_label("novalue").is_err());
        assert!(parse_label("=v").is_err());
    }
}
