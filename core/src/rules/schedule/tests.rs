use proptest::prelude::*;

use super::*;
use crate::limit::limit;
use crate::rules::expiry::parse_instant;
use crate::NANOS_PER_SEC;

fn at(text: &str) -> u64 {
    parse_instant(text).unwrap()
}

fn window(days: &[&str], kind: SpanKind, span: &str) -> Window {
    let bits = days
        .iter()
        .map(|d| day_bit(d).unwrap())
        .fold(0, |a, b| a | b);
    Window::new(
        None,
        bits,
        Span::parse(span, kind).unwrap(),
        limit(1, NANOS_PER_SEC, 1),
    )
}

#[test]
fn weekdays_start_on_monday() {
    assert_eq!(weekday(0), 3, "1970-01-01 was a Thursday");
    assert_eq!(weekday(FIRST_MONDAY), 0);
    assert_eq!(weekday(at("2026-11-30")), 0, "a Monday");
    assert_eq!(weekday(at("2026-12-06T23:59:59Z")), 6, "a Sunday");
    assert_eq!(
        week_time(at("2026-12-01T09:00:30Z") * NANOS_PER_SEC),
        "Tue 09:00:30 UTC"
    );
}

#[test]
fn spans_read_from_included_to_excluded() {
    let w = window(&[], SpanKind::Minutes, "00m00s-00m30s");
    // The first 30 seconds of every hour, 00:00:00 to 00:00:29.
    assert!(w.covers(at("2026-12-01T09:00:00Z")));
    assert!(w.covers(at("2026-12-01T09:00:29Z")));
    assert!(!w.covers(at("2026-12-01T09:00:30Z")));
    assert!(!w.covers(at("2026-12-01T08:59:59Z")));
    // Up to the end of the hour.
    let w = window(&[], SpanKind::Minutes, "59:00-60:00");
    assert!(w.covers(at("2026-12-01T09:59:00Z")));
    assert!(w.covers(at("2026-12-01T09:59:59Z")));
    assert!(!w.covers(at("2026-12-01T10:00:00Z")));
    // Hours of the day, up to midnight.
    let w = window(&[], SpanKind::Hours, "09:00-24:00");
    assert!(w.covers(at("2026-12-01T23:59:59Z")));
    assert!(!w.covers(at("2026-12-02T00:00:00Z")));
    assert!(!w.covers(at("2026-12-01T08:59:59Z")));
    assert_eq!(w.span().text(), "09:00-24:00");
    assert_eq!(w.span().field(), "hours");
}

#[test]
fn a_span_that_runs_past_its_period_belongs_to_the_day_it_opened() {
    // Monday nights: 23:00 Monday to 01:00 Tuesday, not 00:00-01:00 Monday.
    let w = window(&["mon"], SpanKind::Hours, "23:00-01:00");
    assert!(w.covers(at("2026-11-30T23:00:00Z")));
    assert!(
        w.covers(at("2026-12-01T00:59:59Z")),
        "Tuesday 00:59, opened Monday"
    );
    assert!(!w.covers(at("2026-12-01T01:00:00Z")));
    assert!(
        !w.covers(at("2026-11-30T00:30:00Z")),
        "Monday 00:30 opened on Sunday"
    );
    assert!(!w.covers(at("2026-12-01T23:30:00Z")), "Tuesday 23:30");
    assert_eq!(w.span().text(), "23:00-01:00");
    // Across the hour: the last and first 30 seconds, opened on Sunday.
    let w = window(&["sun"], SpanKind::Minutes, "59m30s-00m30s");
    assert!(w.covers(at("2026-12-06T23:59:40Z")));
    assert!(
        w.covers(at("2026-12-07T00:00:10Z")),
        "Monday 00:00:10, opened Sunday"
    );
    assert!(
        !w.covers(at("2026-12-06T00:00:10Z")),
        "Sunday 00:00:10, opened Saturday"
    );
    assert!(w.covers(at("2026-12-06T00:59:30Z")));
}

#[test]
fn the_week_wraps_from_sunday_to_monday() {
    let w = window(&["sun"], SpanKind::Hours, "22:00-02:00");
    assert!(w.covers(at("2026-12-06T22:00:00Z")), "Sunday 22:00");
    assert!(w.covers(at("2026-12-07T01:59:59Z")), "Monday 01:59");
    assert!(!w.covers(at("2026-12-07T02:00:00Z")));
    assert!(!w.covers(at("2026-12-07T22:00:00Z")), "Monday 22:00");
    // One week on, the same.
    assert!(w.covers(at("2026-12-14T01:00:00Z")));
    // Weekdays only: Friday's window, not Saturday's or Sunday's.
    let w = window(
        &["mon", "tue", "wed", "thu", "fri"],
        SpanKind::Hours,
        "09:00-17:00",
    );
    assert!(w.covers(at("2026-12-04T16:59:59Z")), "Friday");
    assert!(!w.covers(at("2026-12-05T10:00:00Z")), "Saturday");
    assert!(!w.covers(at("2026-12-06T10:00:00Z")), "Sunday");
    assert!(w.covers(at("2026-12-07T09:00:00Z")), "Monday");
    assert_eq!(w.days(), Some(vec!["mon", "tue", "wed", "thu", "fri"]));
}

#[test]
fn the_first_window_that_covers_an_instant_wins() {
    let s = Schedule::new(vec![
        window(&["mon"], SpanKind::Minutes, "00m00s-00m30s"),
        window(&[], SpanKind::Minutes, "00:00-01:00"),
    ]);
    let ns = |t: &str| at(t) * NANOS_PER_SEC;
    assert_eq!(s.window_at(ns("2026-11-30T10:00:10Z")), Some(0), "Monday");
    assert_eq!(s.window_at(ns("2026-12-01T10:00:10Z")), Some(1), "Tuesday");
    assert_eq!(s.window_at(ns("2026-11-30T10:00:45Z")), Some(1));
    assert_eq!(s.window_at(ns("2026-11-30T10:01:00Z")), None);
    // Nanoseconds within the last second of a window are still in it.
    assert_eq!(
        s.window_at(ns("2026-12-01T10:00:59Z") + 999_999_999),
        Some(1)
    );
}

#[test]
fn a_denial_lasts_no_longer_than_the_next_edge() {
    let s = Schedule::new(vec![
        window(&[], SpanKind::Minutes, "00m00s-00m30s"),
        window(&["sat"], SpanKind::Hours, "09:00-17:00"),
    ]);
    let ns = |t: &str| at(t) * NANOS_PER_SEC;
    // Inside the first 30 s: until it closes, to the nanosecond.
    assert_eq!(
        s.until_change_ns(ns("2026-12-01T10:00:10Z")),
        Some(20 * NANOS_PER_SEC)
    );
    assert_eq!(
        s.until_change_ns(ns("2026-12-01T10:00:29Z") + 400_000_000),
        Some(600_000_000)
    );
    // Outside: until the next hour opens it (Tuesday: the Saturday window's
    // 09:00 edge counts as well, whatever its days, and is later).
    assert_eq!(
        s.until_change_ns(ns("2026-12-01T10:59:59Z")),
        Some(NANOS_PER_SEC)
    );
    assert_eq!(
        s.until_change_ns(ns("2026-12-01T08:59:50Z")),
        Some(10 * NANOS_PER_SEC)
    );
    assert_eq!(Schedule::default().until_change_ns(0), None);
}

#[test]
fn bad_spans_are_refused_with_the_form_to_write() {
    for (text, kind) in [
        ("00:00", SpanKind::Minutes),
        ("0:00-0:30", SpanKind::Minutes),
        ("00m60s-01m00s", SpanKind::Minutes),
        ("00m00s-60m01s", SpanKind::Minutes),
        ("00-61", SpanKind::Minutes),
        ("0-30", SpanKind::Minutes),
        ("61:00-62:00", SpanKind::Minutes),
        ("first 30 seconds", SpanKind::Minutes),
        ("09:00-25:00", SpanKind::Hours),
        ("9-17", SpanKind::Hours),
    ] {
        let e = Span::parse(text, kind).unwrap_err().to_string();
        assert!(e.contains("is not a span: write FROM-TO as"), "{text}: {e}");
    }
    assert!(Span::parse("10:00-10:00", SpanKind::Minutes)
        .unwrap_err()
        .to_string()
        .contains("opens and closes at the same time"));
    assert!(Span::parse("60:00-10:00", SpanKind::Minutes)
        .unwrap_err()
        .to_string()
        .contains("cannot open at the end"));
    // Spaces around the parts are allowed.
    assert_eq!(
        Span::parse(" 00m00s - 00m30s ", SpanKind::Minutes)
            .unwrap()
            .text(),
        "00m00s-00m30s"
    );
}

/// The reference: the same question asked in calendar terms (second of the
/// period, the period's day, the day before for a span that wrapped).
fn reference(days: u8, kind: SpanKind, from: u64, to: u64, t: u64) -> bool {
    let p = kind.period();
    let on = |day_start: u64| days & (1 << weekday(day_start)) != 0;
    let into = t % p;
    let start = t - into;
    if from < to {
        (from..to).contains(&into) && on(start)
    } else {
        // Wraps: the tail of the span opened this period, the head last period.
        (into >= from && on(start)) || (into < to && start >= p && on(start - p))
    }
}

/// A fraction of the period in whole units of the span's second number
/// (seconds for `minutes`, minutes for `hours`).
fn whole(kind: SpanKind, frac: f64) -> u64 {
    let small = kind.units().1;
    (frac * kind.period() as f64) as u64 / small * small
}

/// The span from `from` to `to` (seconds into the period), parsed from its text.
fn span(kind: SpanKind, from: u64, to: u64) -> Span {
    let (big, small) = kind.units();
    let show = |s: u64| match kind {
        SpanKind::Hours => format!("{:02}:{:02}", s / big, s % big / small),
        SpanKind::Minutes => format!("{:02}m{:02}s", s / big, s % big / small),
    };
    Span::parse(&format!("{}-{}", show(from), show(to)), kind).unwrap()
}

fn kind() -> impl Strategy<Value = SpanKind> {
    prop_oneof![Just(SpanKind::Minutes), Just(SpanKind::Hours)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::testing::proptest_cases(2_000)))]

    /// The window is in force exactly when the calendar says it is, on every
    /// day of the week, at every second (edges, midnights, the week's wrap).
    #[test]
    fn a_window_covers_what_the_calendar_says(
        days in 1u8..128,
        kind in kind(),
        from_frac in 0.0f64..1.0,
        to_frac in 0.0f64..1.0,
        t in 86_400u64..4_102_444_800,
    ) {
        let p = kind.period();
        let from = whole(kind, from_frac).min(p - kind.units().1);
        let to = whole(kind, to_frac).max(kind.units().1);
        prop_assume!(from != to);
        let w = Window::new(None, days, span(kind, from, to), limit(1, NANOS_PER_SEC, 1));
        prop_assert_eq!(w.covers(t), reference(days, kind, from, to % p, t));
        // The week repeats.
        prop_assert_eq!(w.covers(t), w.covers(t + WEEK));
    }

    /// At each opening the window is in force, the second before it is not;
    /// at its close the last second is in force and the close is not.
    #[test]
    fn a_window_opens_and_closes_on_the_second(
        day in 0u8..7,
        kind in kind(),
        from_frac in 0.0f64..1.0,
        len_frac in 0.0f64..1.0,
        week in 1u64..3_000,
    ) {
        let (p, small) = (kind.period(), kind.units().1);
        let from = whole(kind, from_frac).min(p - small);
        let len = whole(kind, len_frac).clamp(small, p - small);
        let w = Window::new(None, 1 << day, span(kind, from, (from + len) % p), limit(1, NANOS_PER_SEC, 1));
        // An opening on `day`, `week` weeks after the first Monday.
        let open = FIRST_MONDAY + week * WEEK + u64::from(day) * DAY + from;
        prop_assert!(w.covers(open));
        prop_assert!(!w.covers(open - 1));
        prop_assert!(w.covers(open + len - 1));
        prop_assert!(!w.covers(open + len));
        // Every edge of the week is an instant where the window opens or closes.
        let edges: Vec<u64> = Schedule::new(vec![w.clone()]).week_edges().collect();
        let in_week = |t: u64| (FIRST_MONDAY + (t - FIRST_MONDAY) % WEEK) * NANOS_PER_SEC;
        prop_assert!(edges.contains(&in_week(open)));
        prop_assert!(edges.contains(&in_week(open + len)));
    }
}

#[test]
fn minutes_read_as_they_are_written_and_seconds_say_their_unit() {
    let len = |text: &str| {
        let s = Span::parse(text, SpanKind::Minutes).unwrap();
        (s.len, s.text())
    };
    // Whole minutes: `00-30` is the first half hour; `MM:00` is whole minutes too.
    assert_eq!(len("00-30"), (1_800, "00-30".to_string()));
    assert_eq!(len("15:00-45:00"), (1_800, "15-45".to_string()));
    assert_eq!(len("50-10"), (1_200, "50-10".to_string()));
    // To the second, with units.
    assert_eq!(len("00m00s-00m30s"), (30, "00m00s-00m30s".to_string()));
    // `MM:SS` with seconds reads as half an hour and would be 30 s: refused,
    // naming both spellings.
    let e = Span::parse("00:00-00:30", SpanKind::Minutes)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`00-30`"), "{e}");
    assert!(e.contains("`00m00s-00m30s`"), "{e}");
}
