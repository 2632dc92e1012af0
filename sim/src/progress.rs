//! The terminal progress line (elapsed time, a bar, the running admitted/limit
//! ratio), and Redis's script calls sampled about once a second for the report.

use indicatif::{ProgressBar, ProgressStyle};

use crate::record::{Decision, Recorder};
use crate::scenario::Plan;
use crate::stack::{script_calls, CommandCounts, Stack};

/// Progress of one run.
pub struct Progress<'a> {
    stack: &'a Stack,
    bar: Option<ProgressBar>,
    warmup: f64,
    cursor: usize,
    /// Admitted and ideal-admitted requests since the warmup.
    steady: (u64, u64),
    /// The same per second of arrival.
    seconds: Vec<(u64, u64)>,
    last_counts: Option<Vec<CommandCounts>>,
    scripts: Vec<Vec<u64>>,
}

impl<'a> Progress<'a> {
    pub fn new(plan: &Plan, stack: &'a Stack, show: bool) -> Progress<'a> {
        let s = &plan.scenario;
        let bar = show.then(|| {
            let bar = ProgressBar::new((s.duration.0 * 10.0).ceil() as u64);
            let style = ProgressStyle::with_template(
                "{prefix:.bold} [{elapsed_precise}] {bar:30.cyan/blue} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_prefix(s.name.clone());
            bar
        });
        Progress {
            stack,
            bar,
            warmup: s.warmup.0,
            cursor: 0,
            steady: (0, 0),
            seconds: Vec::new(),
            last_counts: stack.command_counts().ok(),
            scripts: Vec::new(),
        }
    }

    /// Folds in what was recorded since the last tick; samples Redis when a new
    /// second has started.
    pub fn tick(&mut self, rec: &Recorder, now: f64) {
        let (warmup, steady, seconds) = (self.warmup, &mut self.steady, &mut self.seconds);
        self.cursor = rec.scan(self.cursor, |e| {
            let admitted = matches!(e.decision, Decision::Allowed | Decision::FailAllowed);
            let (a, i) = (u64::from(admitted), u64::from(e.ideal_admit));
            let t = e.arrived_ns as f64 / 1e9;
            if t >= warmup {
                steady.0 += a;
                steady.1 += i;
            }
            let s = t as usize;
            if seconds.len() <= s {
                seconds.resize(s + 1, (0, 0));
            }
            if let Some(slot) = seconds.get_mut(s) {
                slot.0 += a;
                slot.1 += i;
            }
        });
        if now as usize > self.scripts.len() {
            self.sample();
        }
        self.draw(now);
    }

    /// Ends the line; returns the script calls per node of each second.
    pub fn finish(mut self) -> Vec<Vec<u64>> {
        self.sample();
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
        self.scripts
    }

    fn sample(&mut self) {
        let Ok(counts) = self.stack.command_counts() else {
            return;
        };
        let per_node = match &self.last_counts {
            Some(before) => before
                .iter()
                .zip(&counts)
                .map(|(b, a)| script_calls(b, a))
                .collect(),
            None => vec![0; counts.len()],
        };
        self.scripts.push(per_node);
        self.last_counts = Some(counts);
    }

    fn draw(&self, now: f64) {
        let Some(bar) = &self.bar else {
            return;
        };
        bar.set_position((now * 10.0) as u64);
        let ratio = |(a, i): (u64, u64)| {
            if i == 0 {
                "-".to_string()
            } else {
                format!("{:.3}", a as f64 / i as f64)
            }
        };
        let last = (now as usize)
            .checked_sub(1)
            .and_then(|s| self.seconds.get(s).copied())
            .unwrap_or((0, 0));
        let scripts: u64 = self.scripts.last().map_or(0, |n| n.iter().sum());
        bar.set_message(format!(
            "admitted/limit {} (steady) | last second {}/{} | Redis scripts {}/s",
            ratio(self.steady),
            last.0,
            last.1,
            scripts
        ));
    }
}
