//! Running the calls: a bounded number at once, in an order that covers
//! every variant evenly, each result appended as it ends; stopped by the
//! spend cap or a signal, with the file left whole.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::task::JoinSet;

use super::call::{CallOf, CallSettings, SendAs};
use super::progress::Progress;
use super::prompts::{Input, Prompt};
use super::results::{Key, ResultsFile, Row};
use super::stack::{Keys, Stack};
use super::variants::Variant;

/// One call to make: indices into the run's variants, prompts and sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Job {
    pub(crate) variant: usize,
    pub(crate) prompt: usize,
    pub(crate) send: usize,
}

/// What the run is made of, shared by its calls.
pub(crate) struct Run {
    pub(crate) variants: Vec<Variant>,
    pub(crate) prompts: Vec<Prompt>,
    /// Every API and model a call goes to: the `--send`s, then the bodies'.
    pub(crate) sends: Vec<SendAs>,
    /// How many of `sends` are `--send`s.
    pub(crate) flag_sends: usize,
    /// `stacks[variant][send]`: a proxy of its own for each, so that no
    /// two calls of the same prompt meet in one simulated provider.
    pub(crate) stacks: Vec<Vec<Stack>>,
    pub(crate) keys: Option<Keys>,
    pub(crate) settings: CallSettings,
}

impl Run {
    /// Every call, prompt by prompt, each prompt's sends and variants
    /// interleaved: a run stopped early has measured every variant alike.
    pub(crate) fn jobs(&self) -> Vec<Job> {
        let mut jobs = Vec::new();
        for (prompt, p) in self.prompts.iter().enumerate() {
            for send in self.sends_of(p) {
                for variant in 0..self.variants.len() {
                    jobs.push(Job {
                        variant,
                        prompt,
                        send,
                    });
                }
            }
        }
        jobs
    }

    /// The sends a prompt goes to: every `--send` for a text, its own for
    /// a body.
    fn sends_of(&self, prompt: &Prompt) -> Vec<usize> {
        match &prompt.input {
            Input::Text(_) => (0..self.flag_sends).collect(),
            Input::Body { api, model, .. } => self
                .sends
                .iter()
                .position(|s| s.api == *api && s.model == *model)
                .into_iter()
                .collect(),
        }
    }

    /// The key a row of `job` has.
    pub(crate) fn key(&self, job: Job) -> Key {
        let send = &self.sends[job.send];
        (
            self.variants[job.variant].name.clone(),
            self.prompts[job.prompt].id.clone(),
            send.api.as_str().to_owned(),
            send.model.clone(),
        )
    }

    /// Whether `row` measured `job` as the run now defines it (the same
    /// variant flags, the same prompt line).
    pub(crate) fn measured(&self, job: Job, row: &Row) -> bool {
        row.is_done()
            && row.variant_hash == self.variants[job.variant].hash
            && row.prompt_hash == self.prompts[job.prompt].hash
    }

    async fn call(self: Arc<Self>, job: Job) -> Row {
        let call = CallOf {
            stack: &self.stacks[job.variant][job.send],
            variant: &self.variants[job.variant],
            prompt: &self.prompts[job.prompt],
            send: &self.sends[job.send],
            keys: self.keys.as_ref(),
            settings: &self.settings,
        };
        call.run().await
    }
}

/// The spend cap: upstream requests and reported tokens this run may
/// spend. A call counts one request when it starts (so no more calls start
/// than the cap allows) and the rest when it ends; calls in flight when the
/// cap is reached still end, so the spend may pass the cap by what they
/// take.
#[derive(Debug, Clone, Default)]
pub(crate) struct Budget {
    pub(crate) max_requests: Option<u64>,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) requests: u64,
    pub(crate) tokens: u64,
}

impl Budget {
    /// Why no call may start now, if none may.
    fn spent(&self) -> Option<String> {
        if let Some(max) = self.max_requests.filter(|max| self.requests >= *max) {
            return Some(format!(
                "{} requests sent, the cap is {max} (--cap-requests)",
                self.requests
            ));
        }
        if let Some(max) = self.max_tokens.filter(|max| self.tokens >= *max) {
            return Some(format!(
                "{} tokens reported, the cap is {max} (--cap-tokens)",
                self.tokens
            ));
        }
        None
    }

    fn start(&mut self) {
        self.requests += 1;
    }

    fn end(&mut self, row: &Row) {
        self.requests += u64::from(row.requests.saturating_sub(1));
        self.tokens += row.tokens;
    }
}

/// Why a run ended before its last call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The spend cap was reached (what was spent).
    Cap(String),
    /// SIGINT or SIGTERM.
    Interrupted,
    /// The results file could not be written.
    Failed(String),
}

/// How many calls ran, and why the rest did not.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) rows: Vec<Row>,
    pub(crate) stop: Option<Stop>,
    pub(crate) budget: Budget,
}

/// Makes `jobs`' calls, `concurrency` at once, appending each row to
/// `results` as it ends, until they are done, the budget is spent or
/// `interrupt` completes (then the calls in flight are dropped, which
/// stops their work upstream, and none of them is written).
pub(crate) async fn drive(
    run: Arc<Run>,
    jobs: Vec<Job>,
    concurrency: usize,
    mut budget: Budget,
    results: &ResultsFile,
    progress: &Progress,
    interrupt: impl std::future::Future<Output = ()>,
) -> Ran {
    let mut queue: VecDeque<Job> = jobs.into();
    let mut running = JoinSet::new();
    let mut rows = Vec::new();
    let mut stop = None;
    let mut interrupt = std::pin::pin!(interrupt);
    loop {
        while stop.is_none() && running.len() < concurrency.max(1) && !queue.is_empty() {
            if let Some(spent) = budget.spent() {
                stop = Some(Stop::Cap(spent));
                break;
            }
            let job = queue.pop_front().expect("not empty");
            budget.start();
            running.spawn(run.clone().call(job));
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            joined = running.join_next() => {
                let Some(Ok(row)) = joined else { continue };
                budget.end(&row);
                if let Err(error) = results.append(&row) {
                    stop = Some(Stop::Failed(error));
                    running.abort_all();
                }
                progress.ended(&row);
                rows.push(row);
            }
            () = &mut interrupt, if stop != Some(Stop::Interrupted) => {
                stop = Some(Stop::Interrupted);
                running.abort_all();
            }
        }
    }
    Ran { rows, stop, budget }
}
