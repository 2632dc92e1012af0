//! The PNG: admitted per second against the limit over time (all keys), with
//! the offered load and what an ideal limiter would have admitted.

use std::path::Path;
use std::sync::Once;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::error::SimError;
use crate::measure::Second;
use crate::RunReport;

static FONT: Once = Once::new();

/// A line of the plot: its legend, colour, and value of a second.
type Series = (&'static str, RGBColor, u32, fn(&Second) -> f64);

/// Draws `report`'s per-second rows into a 1200×600 PNG at `path`.
pub fn draw(path: &Path, report: &RunReport) -> Result<(), SimError> {
    // Text needs a font; the one embedded in the binary keeps the plot the same
    // on every machine (no system fonts needed).
    FONT.call_once(|| {
        let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
    // Whole seconds of the run only: the last partial one holds a few late
    // arrivals and would read as a drop to zero.
    let whole = report.setup.duration.floor() as usize;
    let rows: Vec<&Second> = report
        .figures
        .seconds
        .iter()
        .filter(|s| s.key.is_none() && s.second < whole)
        .collect();
    let err = |e: &dyn std::fmt::Display| SimError::Plot(e.to_string());
    let root = BitMapBackend::new(path, (1200, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let x_max = report.setup.duration.max(1.0);
    let y_max = rows
        .iter()
        .map(|s| (s.offered as f64).max(s.limit).max(s.admitted as f64))
        .fold(1.0, f64::max)
        * 1.1;
    let title = format!(
        "{}: admitted/s against the limit (steady admitted/limit {:.3})",
        report.name, report.figures.steady.ratio
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("requests per second")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(RGBColor(240, 240, 240))
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    draw_lines(&mut chart, report, &rows, y_max)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::MiddleRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The warmup marker and the four lines.
fn draw_lines<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    report: &RunReport,
    rows: &[&Second],
    y_max: f64,
) -> Result<(), SimError> {
    let err = |e: &dyn std::fmt::Display| SimError::Plot(e.to_string());
    let warmup = report.setup.warmup;
    let grey = RGBColor(0, 140, 70);
    chart
        .draw_series(LineSeries::new(
            [(warmup, 0.0), (warmup, y_max)],
            grey.stroke_width(2),
        ))
        .map_err(|e| err(&e))?
        .label("steady part from here")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(2)));
    // The ideal limiter is drawn wide and first, so the limit and the admitted
    // line show on top of it where they agree.
    let series: [Series; 4] = [
        (
            "ideal limiter, same arrivals",
            RGBColor(255, 190, 110),
            7,
            |s| s.ideal as f64,
        ),
        ("limit (rate)", RED, 2, |s| s.limit),
        ("offered", RGBColor(160, 160, 160), 2, |s| s.offered as f64),
        ("admitted", BLUE, 2, |s| s.admitted as f64),
    ];
    for (label, color, width, value) in series {
        // Points sit mid-second: each row counts arrivals in [s, s + 1).
        let points = rows.iter().map(|s| (s.second as f64 + 0.5, value(s)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(width)))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
            });
    }
    Ok(())
}
