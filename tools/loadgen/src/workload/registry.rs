//! Which workload the flags ask for, built once per run ([`Catalog::open`]: a trace or a
//! prompts file read) and once per prompt length ([`Catalog::workload`]: synthetic prompts
//! aligned against the server). A new workload is a file of this folder implementing
//! [`Workload`] and its line in [`Catalog::workload`].

use super::Workload;
use super::conversation::{Sessions, Think, Turns, Users};
use super::eval::{self, Questions};
use super::listed::Listed;
use super::prompts::{self, Entry};
use super::synthetic::SyntheticPrompts;
use super::trace::{self, Replay};
use crate::client::body::Api;
use crate::stop::{Stop, until_stopped};
use crate::workload::align::Aligner;
use servbench::cli;
use servbench::load::eval::Match;
use std::sync::Arc;

/// The workload flags, as the plan holds them.
#[derive(Debug, Clone)]
pub struct Spec {
    pub api: Api,
    /// `--prompts FILE` or `builtin`.
    pub prompts: Option<String>,
    pub input_len: Option<Vec<u32>>,
    /// `--prefix-groups` (with `--prefix-len`).
    pub prefix_groups: Option<u32>,
    pub turns: Option<Turns>,
    pub think: Think,
    pub trace: Option<String>,
    pub trace_block: u32,
    /// `--eval FILE` and `--eval-match`.
    pub eval: Option<(String, Match)>,
}

/// What a run's points are made of: read once, a workload per prompt length from it.
pub struct Catalog {
    spec: Spec,
    seed: u64,
    replay: Option<Arc<Replay>>,
    listed: Option<Arc<Vec<Entry>>>,
    questions: Option<Arc<Vec<Arc<eval::Question>>>>,
}

impl Catalog {
    /// Reads what the flags name (a trace, aligned against the server; a prompts file).
    /// `seed` is this process's, `job` the job's seed and this rank's rows of a trace.
    pub async fn open(
        spec: Spec,
        seed: u64,
        job: (u64, (u64, u64)),
        aligner: &mut Aligner,
        stop: &Stop,
        max_model_len: Option<u32>,
    ) -> anyhow::Result<Catalog> {
        let replay = match &spec.trace {
            Some(path) => Some(Arc::new(
                trace::replay(
                    path,
                    spec.trace_block,
                    aligner,
                    stop,
                    max_model_len,
                    job.0,
                    job.1,
                )
                .await?,
            )),
            None => None,
        };
        let listed = match spec.prompts.as_deref() {
            _ if replay.is_some() => None,
            None => None,
            Some("builtin") => Some(prompts::builtin()),
            // Conversations read the file's every user turn (below).
            Some(_) if spec.turns.is_some() => Some(Vec::new()),
            Some(path) => Some(super::prompt_files::read_prompts_file(path).map_err(cli::usage)?),
        };
        let questions = match &spec.eval {
            Some((path, how)) => Some(Arc::new(
                eval::read(path, *how)
                    .map_err(cli::usage)?
                    .into_iter()
                    .map(Arc::new)
                    .collect(),
            )),
            None => None,
        };
        Ok(Catalog {
            questions,
            spec,
            seed,
            replay,
            listed: listed.map(Arc::new),
        })
    }

    /// The prompt lengths of the sweep: a trace's rows and listed prompts have their own
    /// (`None`), synthetic prompts default to 256 tokens.
    pub fn input_lens(&self) -> Vec<Option<u32>> {
        match (&self.spec.input_len, &self.listed) {
            _ if self.replay.is_some() || self.questions.is_some() => vec![None],
            (Some(l), _) => l.iter().copied().map(Some).collect(),
            (None, Some(_)) => vec![None],
            (None, None) => vec![Some(256)],
        }
    }

    /// The requests ask for an exact output length (synthetic prompts, a trace's rows).
    pub fn exact_lengths(&self, input_len: Option<u32>) -> bool {
        input_len.is_some() || self.replay.is_some()
    }

    pub fn is_trace(&self) -> bool {
        self.replay.is_some()
    }

    /// The workload of one prompt length of the sweep (`input_len` from [`Self::input_lens`]).
    pub async fn workload(
        &self,
        input_len: Option<u32>,
        aligner: &mut Aligner,
        stop: &Stop,
    ) -> anyhow::Result<Arc<dyn Workload>> {
        let s = &self.spec;
        if let Some(all) = &self.questions {
            return Ok(Arc::new(Questions { all: all.clone() }));
        }
        let base: Arc<dyn Workload> = match (input_len, &self.listed, &self.replay) {
            (_, _, Some(r)) => r.clone(),
            (Some(n), _, _) => Arc::new(SyntheticPrompts {
                prompt: until_stopped(stop, async { Ok(aligner.align(n).await) }).await?,
                seed: self.seed,
                groups: s.prefix_groups.unwrap_or(0),
            }),
            (None, Some(entries), _) => Arc::new(Listed {
                entries: entries.clone(),
                order: Arc::new(prompts::shuffled_order(entries.len(), self.seed)),
            }),
            (None, None, None) => unreachable!("input_lens has Some when there is no list"),
        };
        let Some(turns) = s.turns else {
            return Ok(base);
        };
        // Conversations: synthetic prompts as each turn's length, or the file's conversations.
        let users = match (input_len, &self.replay, s.prompts.as_deref()) {
            (Some(n), None, _) => {
                Users::Synthetic(until_stopped(stop, async { Ok(aligner.align(n).await) }).await?)
            }
            (_, _, Some(path)) if path != "builtin" => {
                let all = super::prompt_files::read_conversations(path).map_err(cli::usage)?;
                let order = prompts::shuffled_order(all.len(), self.seed);
                Users::Listed(Arc::new(all), Arc::new(order))
            }
            _ => {
                return Err(cli::usage(
                    "--turns needs synthetic prompts (--input-len) or a conversations file (--prompts FILE)",
                ));
            }
        };
        Ok(Arc::new(Sessions {
            api: s.api,
            users,
            turns,
            think: s.think,
            seed: self.seed,
        }))
    }
}
