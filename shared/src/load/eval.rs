//! Judging an eval answer (`loadgen --eval`): `number` compares the reply's last number with
//! the expected one (gsm8k-style: commas and a leading `$` ignored), `exact` the reply's trimmed
//! text with the expected text. The verdict is a `request` record's `eval`.

use crate::record::{EvalVerdict, Verdict};

/// How an answer is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Match {
    /// The reply's final number equals the answer's (gsm8k-style)
    Number,
    /// The reply's trimmed text equals the answer's
    Exact,
}

/// A question's expected answer, and how an answer is judged against it.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// The question's line in its file, from 1.
    pub line: u32,
    pub answer: String,
    pub how: Match,
}

/// The longest `got` a verdict carries.
const GOT_CHARS: usize = 64;

impl Expected {
    /// The verdict on `reply` (`None`: no whole answer to judge).
    pub fn judge(&self, reply: Option<&str>) -> EvalVerdict {
        let Some(reply) = reply else {
            return EvalVerdict {
                line: self.line,
                verdict: Verdict::NotJudged,
                got: None,
            };
        };
        let (got, correct) = match self.how {
            Match::Number => {
                let got = last_number(reply);
                let correct = got
                    .as_deref()
                    .zip(number(&self.answer))
                    .is_some_and(|(g, want)| number(g) == Some(want));
                (got, correct)
            }
            Match::Exact => {
                let got = reply.trim();
                (
                    (!got.is_empty()).then(|| got.to_string()),
                    got == self.answer.trim(),
                )
            }
        };
        EvalVerdict {
            line: self.line,
            verdict: if correct {
                Verdict::Correct
            } else {
                Verdict::Wrong
            },
            got: got.map(|g| g.chars().take(GOT_CHARS).collect()),
        }
    }
}

/// A number as written (`1,234`, `$5`, `-3.50`), as a value to compare.
pub fn number(text: &str) -> Option<f64> {
    let t: String = text
        .trim()
        .trim_start_matches('$')
        .chars()
        .filter(|c| *c != ',')
        .collect();
    let t = t.trim_end_matches('.');
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// The last number in `text`: digits, with commas between them and one decimal point, a minus
/// sign right before.
fn last_number(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut last = None;
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = if i > 0 && b[i - 1] == b'-' { i - 1 } else { i };
        let mut end = i;
        let mut dot = false;
        while end < b.len() {
            let c = b[end];
            let between = end + 1 < b.len() && b[end + 1].is_ascii_digit();
            if c.is_ascii_digit() || (c == b',' && between) || (c == b'.' && between && !dot) {
                dot |= c == b'.';
                end += 1;
            } else {
                break;
            }
        }
        last = Some(text[start..end].to_string());
        i = end;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(answer: &str, how: Match) -> Expected {
        Expected {
            line: 3,
            answer: answer.into(),
            how,
        }
    }

    #[test]
    fn a_number_answer_is_the_replys_last_number() {
        let want = q("1234", Match::Number);
        let v = want.judge(Some("3 apples, 7 pears: so 1,234.\n"));
        assert_eq!(
            (v.verdict, v.got.as_deref()),
            (Verdict::Correct, Some("1,234"))
        );
        let v = want.judge(Some("The answer is 1234 then 12"));
        assert_eq!((v.verdict, v.got.as_deref()), (Verdict::Wrong, Some("12")));
        assert_eq!(
            q("-2.5", Match::Number).judge(Some("x = -2.50")).verdict,
            Verdict::Correct
        );
        let none = want.judge(Some("no digits here"));
        assert_eq!((none.verdict, none.got), (Verdict::Wrong, None));
        assert_eq!(want.judge(None).verdict, Verdict::NotJudged);
        assert_eq!(last_number("pay $1,000.50."), Some("1,000.50".into()));
    }

    #[test]
    fn an_exact_answer_is_the_replys_trimmed_text() {
        let want = q("Paris", Match::Exact);
        assert_eq!(want.judge(Some(" Paris\n")).verdict, Verdict::Correct);
        assert_eq!(want.judge(Some("Paris.")).verdict, Verdict::Wrong);
    }
}
