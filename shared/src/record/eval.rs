//! Quality beside speed: a `request`'s verdict on an eval question (`loadgen --eval`), a
//! point's accuracy, and the reply text a request carries (`loadgen --record-text`).

use serde::{Deserialize, Serialize};

/// How one answer compared with the question's expected answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Correct,
    Wrong,
    /// No whole answer to judge: the request failed or was cancelled.
    NotJudged,
}

/// A `request`'s part of an eval run: which question it asked and what its answer was worth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalVerdict {
    /// The question's line in the `--eval` file, from 1.
    pub line: u32,
    pub verdict: Verdict,
    /// What was compared with the expected answer: the reply's final number (`number`), or
    /// its trimmed text (`exact`), cut to 64 characters; absent when there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub got: Option<String>,
}

/// A point's accuracy on its eval questions: `correct / judged`, and how many requests had no
/// answer to judge (failed or cancelled).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalSummary {
    pub correct: u64,
    pub judged: u64,
    pub not_judged: u64,
    /// `correct / judged`; absent when nothing was judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
}

impl EvalSummary {
    /// Counts one request's verdict.
    pub fn add(&mut self, v: Verdict) {
        match v {
            Verdict::Correct => {
                self.correct += 1;
                self.judged += 1;
            }
            Verdict::Wrong => self.judged += 1,
            Verdict::NotJudged => self.not_judged += 1,
        }
        self.accuracy = self.accuracy_now();
    }

    pub fn merge(&mut self, other: &EvalSummary) {
        self.correct += other.correct;
        self.judged += other.judged;
        self.not_judged += other.not_judged;
        self.accuracy = self.accuracy_now();
    }

    fn accuracy_now(&self) -> Option<f64> {
        (self.judged > 0).then(|| self.correct as f64 / self.judged as f64)
    }
}

/// A `request`'s answer checked against `loadgen --response-format`'s JSON schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonVerdict {
    /// Whether the answer is JSON valid for the schema; absent when there was no whole answer
    /// to check (the request failed or was cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid: Option<bool>,
    /// Why it is not: the first error (`not JSON: ...`, or where in the answer and what the
    /// schema wanted), cut to 160 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl JsonVerdict {
    /// As a point counts it (valid: `correct`).
    pub fn verdict(&self) -> Verdict {
        match self.valid {
            Some(true) => Verdict::Correct,
            Some(false) => Verdict::Wrong,
            None => Verdict::NotJudged,
        }
    }
}

/// The reply's text from its pieces (one per content chunk): what `--record-text` recorded.
pub fn joined_text(pieces: &[String]) -> String {
    pieces.concat()
}

/// Where two replies first differ, in `a`'s pieces (a token each with most servers): `None`
/// when their texts are identical, however the server cut them into chunks (a batch of four
/// streams several tokens a chunk at times); else the index of `a`'s piece that holds the first
/// byte that differs (or its end, where one text is the start of the other).
pub fn first_difference(a: &[String], b: &[String]) -> Option<usize> {
    let mut bytes_b = b.iter().flat_map(|p| p.bytes());
    for (i, piece) in a.iter().enumerate() {
        for byte in piece.bytes() {
            if bytes_b.next() != Some(byte) {
                return Some(i);
            }
        }
    }
    // All of `a` matched: identical unless `b` goes on.
    bytes_b.next().map(|_| a.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(s: &[&str]) -> Vec<String> {
        s.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn accuracy_is_correct_over_judged_and_the_unjudged_apart() {
        let mut s = EvalSummary::default();
        for v in [
            Verdict::Correct,
            Verdict::Wrong,
            Verdict::Correct,
            Verdict::NotJudged,
        ] {
            s.add(v);
        }
        assert_eq!((s.correct, s.judged, s.not_judged), (2, 3, 1));
        assert_eq!(s.accuracy, Some(2.0 / 3.0));
        let mut none = EvalSummary::default();
        none.add(Verdict::NotJudged);
        assert_eq!(none.accuracy, None);
        none.merge(&s);
        assert_eq!((none.correct, none.judged, none.not_judged), (2, 3, 2));
    }

    #[test]
    fn first_difference_is_the_first_piece_that_differs_or_is_missing() {
        let a = pieces(&["The", " answer", " is", " 4"]);
        assert_eq!(first_difference(&a, &a.clone()), None);
        assert_eq!(
            first_difference(&a, &pieces(&["The", " answer", " was", " 4"])),
            Some(2)
        );
        assert_eq!(first_difference(&a, &pieces(&["The", " answer"])), Some(2));
        // The same text cut into other chunks is the same answer.
        assert_eq!(
            first_difference(&a, &pieces(&["The answer", " is 4"])),
            None
        );
        assert_eq!(
            first_difference(&a, &pieces(&["The answer", " is 5"])),
            Some(3)
        );
        assert_eq!(first_difference(&pieces(&["The"]), &a), Some(1));
        assert_eq!(joined_text(&a), "The answer is 4");
    }
}
