//! Schedules: time windows in which a rule has another limit (ten times the
//! burst during the first 30 seconds of every hour, say, for the top-of-the-hour
//! rush). A window is a span within every hour (`minutes: "00-30"`, or to the
//! second `minutes: "00m00s-00m30s"`) or
//! within every day (`hours: "09:00-17:00"`), in UTC, optionally only on some
//! days of the week; the first window that covers an instant gives the limit in
//! force, and outside every window the rule's own limit applies.
//!
//! [`Schedule::window_at`] is the one answer to "which window is in force at
//! this instant": the filter (its host's clock), the agent (its lease calls),
//! `explain` and `replay` all ask it, through [`super::Rule::limit_in_force`],
//! so they cannot drift.

use crate::limit::Limit;

/// Seconds in a day and in a week.
const DAY: u64 = 86_400;
const WEEK: u64 = 7 * DAY;
/// 1970-01-05, the first Monday of Unix time (1970-01-01 was a Thursday).
const FIRST_MONDAY: u64 = 4 * DAY;
/// The most windows a rule may have.
pub const MAX_WINDOWS: usize = 32;
/// Day names as the rules file writes them, Monday first.
pub const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// A rule's windows, in the file's order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schedule {
    windows: Vec<Window>,
}

/// One compiled window.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// The window's `name`, if it has one.
    pub name: Option<String>,
    /// Bit `d` set: the window opens on day `d` (0 = Monday), UTC.
    days: u8,
    span: Span,
    /// The limit in force inside the window.
    pub limit: Limit,
}

/// A span that recurs every `period` seconds (an hour or a day): it opens
/// `from` seconds into the period and lasts `len` seconds (less than the
/// period; it may run into the next period, wrapping past its end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    period: u64,
    from: u64,
    len: u64,
}

/// Which kind of span a window has: within the hour or within the day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// `minutes: "MM-MM"` (or `MMmSSs-MMmSSs`), every hour.
    Minutes,
    /// `hours: "HH:MM-HH:MM"`, every day.
    Hours,
}

impl SpanKind {
    fn period(self) -> u64 {
        match self {
            SpanKind::Minutes => 3_600,
            SpanKind::Hours => DAY,
        }
    }

    /// Seconds in one unit of the span's first number (a minute, an hour) and
    /// in one unit of its second (a second, a minute).
    fn units(self) -> (u64, u64) {
        match self {
            SpanKind::Minutes => (60, 1),
            SpanKind::Hours => (3_600, 60),
        }
    }

    fn example(self) -> &'static str {
        match self {
            SpanKind::Minutes => "`00-30` (minutes MM-MM within every hour, up to 60), or to the second `00m00s-00m30s`",
            SpanKind::Hours => "`09:00-17:30` (HH:MM-HH:MM within every day, up to 24:00)",
        }
    }

    /// One end of a span, in seconds into the period: `HH:MM` of a day;
    /// `MM`, `MMmSSs` or `MM:00` of an hour. `MM:SS` with seconds is refused:
    /// `00:00-00:30` reads as half an hour and would be 30 seconds.
    fn at<'a>(self, text: &'a str, t: &str) -> Result<u64, SpanError<'a>> {
        let bad = || SpanError::NotASpan { text, kind: self };
        let two = |s: &str| {
            (s.len() == 2 && s.bytes().all(|c| c.is_ascii_digit()))
                .then(|| s.parse::<u64>().ok())
                .flatten()
        };
        let t = t.trim();
        let (big, small) = match self {
            SpanKind::Hours => {
                let (h, m) = t.split_once(':').ok_or_else(bad)?;
                (two(h).ok_or_else(bad)?, two(m).ok_or_else(bad)?)
            }
            SpanKind::Minutes => match (t.split_once(':'), t.strip_suffix('s')) {
                (Some((m, s)), _) => match (two(m), two(s)) {
                    (Some(m), Some(0)) => (m, 0),
                    (Some(_), Some(s)) if s < 60 => return Err(SpanError::ClockSeconds(text)),
                    _ => return Err(bad()),
                },
                (None, Some(ms)) => {
                    let (m, s) = ms.split_once('m').ok_or_else(bad)?;
                    (two(m).ok_or_else(bad)?, two(s).ok_or_else(bad)?)
                }
                (None, None) => (two(t).ok_or_else(bad)?, 0),
            },
        };
        let (unit, sub) = self.units();
        let secs = big * unit + small * sub;
        (small < 60 && secs <= self.period())
            .then_some(secs)
            .ok_or_else(bad)
    }
}

/// Why a window's span was refused: the span as written (borrowed: refusing
/// one allocates nothing), and how to write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SpanError<'a> {
    #[error("`{text}` is not a span: write FROM-TO as {}", .kind.example())]
    NotASpan { text: &'a str, kind: SpanKind },
    /// `minutes: "MM:SS-MM:SS"` with seconds: refused, saying how to write it.
    #[error(
        "`{0}` reads as minutes of a clock but `MM:SS` counts seconds (`00:00-00:30` \
         would be 30 seconds, not half an hour): write whole minutes as `MM-MM` (`00-30`), or \
         seconds with their units, `{}s`",
        with_units(.0)
    )]
    ClockSeconds(&'a str),
    #[error("`{text}`: a span cannot open at the end of the period; write {}", .kind.example())]
    OpensAtEnd { text: &'a str, kind: SpanKind },
    #[error("`{0}` opens and closes at the same time: a window must last between one second and less than the whole period")]
    Empty(&'a str),
}

/// `MM:SS-MM:SS` written with units, without its last `s`: `00m00s-00m30`.
fn with_units(text: &str) -> String {
    let minutes = text.replace(':', "m").replace('-', "s-");
    minutes.trim_end_matches('s').to_string()
}

impl Span {
    /// Parses `FROM-TO` of `kind`. `TO` before `FROM` runs past the end of the
    /// hour (day) into the next; `FROM` equal to `TO` is refused (an empty or
    /// a whole span is said better otherwise).
    pub fn parse(text: &str, kind: SpanKind) -> Result<Span, SpanError<'_>> {
        let (from, to) = text
            .split_once('-')
            .ok_or(SpanError::NotASpan { text, kind })?;
        let period = kind.period();
        let (from, to) = (kind.at(text, from)?, kind.at(text, to)?);
        if from == period {
            return Err(SpanError::OpensAtEnd { text, kind });
        }
        if from == to {
            return Err(SpanError::Empty(text));
        }
        let len = (to + period - from) % period;
        let len = if len == 0 { period } else { len };
        Ok(Span { period, from, len })
    }

    /// How long ago (seconds) the span last opened before or at `t`, and
    /// whether it is still open.
    fn since_opening(&self, t: u64) -> (u64, bool) {
        let ago = (t % self.period + self.period - self.from) % self.period;
        (ago, ago < self.len)
    }

    /// The span as it is written: `HH:MM-HH:MM` of a day; `MM-MM` of an
    /// hour, or `MMmSSs-MMmSSs` when an end is not a whole minute.
    pub fn text(&self) -> String {
        let to = self.from + self.len;
        let to = if to > self.period {
            to - self.period
        } else {
            to
        };
        let whole = self.from.is_multiple_of(60) && to.is_multiple_of(60);
        let show = |s: u64| match (self.period == DAY, whole) {
            (true, _) => format!("{:02}:{:02}", s / 3_600, (s % 3_600) / 60),
            (false, true) => format!("{:02}", s / 60),
            (false, false) => format!("{:02}m{:02}s", s / 60, s % 60),
        };
        format!("{}-{}", show(self.from), show(to))
    }

    /// `minutes` or `hours`: the field the span is written in.
    pub fn field(&self) -> &'static str {
        if self.period == DAY {
            "hours"
        } else {
            "minutes"
        }
    }
}

/// The day of the week of Unix second `t`, 0 = Monday.
pub fn weekday(t: u64) -> u8 {
    ((t / DAY + 3) % 7) as u8
}

/// Parses a day name (`mon` … `sun`) into its bit.
pub fn day_bit(name: &str) -> Option<u8> {
    DAY_NAMES.iter().position(|d| *d == name).map(|i| 1u8 << i)
}

impl Window {
    /// A window opening on the days in `days` (bit 0 = Monday; 0 = every day).
    pub fn new(name: Option<String>, days: u8, span: Span, limit: Limit) -> Self {
        let days = if days & 0x7f == 0 { 0x7f } else { days & 0x7f };
        Window {
            name,
            days,
            span,
            limit,
        }
    }

    /// Whether the window is in force at Unix second `t`: its span is open and
    /// it opened on one of its days (a span running past midnight belongs to
    /// the day it opened on: `sun` with `hours: "22:00-02:00"` covers Monday
    /// 01:00).
    pub fn covers(&self, t: u64) -> bool {
        let (ago, open) = self.span.since_opening(t);
        open && t
            .checked_sub(ago)
            .is_some_and(|opened| self.days & (1 << weekday(opened)) != 0)
    }

    /// The span, as written.
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// The days it opens on, as written (`None`: every day).
    pub fn days(&self) -> Option<Vec<&'static str>> {
        (self.days != 0x7f).then(|| {
            DAY_NAMES
                .iter()
                .enumerate()
                .filter(|(i, _)| self.days & (1 << i) != 0)
                .map(|(_, d)| *d)
                .collect()
        })
    }

    /// One line for people: `top-of-hour: minutes 00m00s-00m30s (mon, tue)`.
    pub fn describe(&self) -> String {
        let days = self
            .days()
            .map(|d| format!(" on {}", d.join(", ")))
            .unwrap_or_default();
        let name = self
            .name
            .as_deref()
            .map(|n| format!("{n}: "))
            .unwrap_or_default();
        format!("{name}{} {} UTC{days}", self.span.field(), self.span.text())
    }

    /// Unix seconds within the week from `FIRST_MONDAY` where the window opens
    /// or closes, as offsets into the week.
    fn edges(&self) -> impl Iterator<Item = u64> + '_ {
        let n = WEEK / self.span.period;
        (0..n).flat_map(move |k| {
            let open = k * self.span.period + self.span.from;
            [open % WEEK, (open + self.span.len) % WEEK]
        })
    }
}

impl Schedule {
    pub fn new(windows: Vec<Window>) -> Self {
        Schedule { windows }
    }

    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// The first window in force at `now_ns` (ns since the Unix epoch, UTC),
    /// by its position; `None` outside every window.
    pub fn window_at(&self, now_ns: u64) -> Option<usize> {
        let t = now_ns / crate::NANOS_PER_SEC;
        self.windows.iter().position(|w| w.covers(t))
    }

    /// How long from `now_ns` (ns since the Unix epoch) until a window of the
    /// schedule next opens or closes, whatever its days (so at or before the
    /// next change of the limit in force); `None` without windows. A cached
    /// denial is kept no longer: at an edge the key is asked again, under the
    /// limit then in force.
    pub fn until_change_ns(&self, now_ns: u64) -> Option<u64> {
        let t = now_ns / crate::NANOS_PER_SEC;
        let into_second = now_ns % crate::NANOS_PER_SEC;
        self.windows
            .iter()
            .map(|w| {
                let (ago, open) = w.span.since_opening(t);
                if open {
                    w.span.len - ago
                } else {
                    w.span.period - ago
                }
            })
            .min()
            .map(|secs| (secs * crate::NANOS_PER_SEC).saturating_sub(into_second))
    }

    /// Instants (ns since the Unix epoch) at which the window in force may
    /// change, one week's worth from the first Monday of Unix time: the
    /// schedule repeats every week, so comparing two schedules at these
    /// instants (and both schedules' instants) compares them at every
    /// instant.
    pub fn week_edges(&self) -> impl Iterator<Item = u64> + '_ {
        self.windows
            .iter()
            .flat_map(Window::edges)
            .map(|s| (FIRST_MONDAY + s) * crate::NANOS_PER_SEC)
    }
}

/// `t` (ns since the Unix epoch) as `Mon 00:00:30 UTC`: where in the week an
/// instant of [`Schedule::week_edges`] falls.
pub fn week_time(now_ns: u64) -> String {
    const NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let t = now_ns / crate::NANOS_PER_SEC;
    let s = t % DAY;
    format!(
        "{} {:02}:{:02}:{:02} UTC",
        NAMES.get(usize::from(weekday(t))).copied().unwrap_or("?"),
        s / 3_600,
        s % 3_600 / 60,
        s % 60
    )
}

#[cfg(test)]
mod tests;
