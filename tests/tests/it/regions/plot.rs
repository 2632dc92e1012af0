//! The load shift as figures: a CSV of admitted per 100 ms per region and each
//! region's share, and a PNG of admitted/s per region (1 s sliding window), the
//! shares (as share × L) and the limit.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::mesh::L;

/// A region's cached share at an instant (seconds since the run started).
pub type ShareSample = (f64, Vec<Option<f64>>);

/// Where the figures go: `target/regions/`.
pub fn out_dir() -> PathBuf {
    let dir = meshlimit_tests::target_dir().join("regions");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `target/regions/<name>.csv` and `.png`; returns their paths.
pub fn figures(
    name: &str,
    regions: &[String],
    bin: f64,
    bins: &[Vec<f64>],
    shares: &[ShareSample],
    shift: f64,
    title: &str,
) -> (PathBuf, PathBuf) {
    let csv = write_csv(name, regions, bin, bins, shares);
    let png = out_dir().join(format!("{name}.png"));
    let rates = per_second(bins, (1.0 / bin).round() as usize);
    draw(&png, title, regions, bin, &rates, shares, shift);
    (csv, png)
}

/// Admitted/s per region at the end of each bin: the sum of the last `per_sec` bins.
fn per_second(bins: &[Vec<f64>], per_sec: usize) -> Vec<Vec<f64>> {
    (0..bins.len())
        .map(|i| {
            let from = (i + 1).saturating_sub(per_sec);
            let regions = bins.first().map_or(0, Vec::len);
            (0..regions)
                .map(|r| bins[from..=i].iter().map(|b| b[r]).sum())
                .collect()
        })
        .collect()
}

/// Writes `name.csv`: `t_s, admitted_<region>…, share_<region>…` per bin.
fn write_csv(
    name: &str,
    regions: &[String],
    bin: f64,
    bins: &[Vec<f64>],
    shares: &[ShareSample],
) -> PathBuf {
    let mut csv = String::from("t_s");
    for r in regions {
        let _ = write!(csv, ",admitted_{r}");
    }
    for r in regions {
        let _ = write!(csv, ",share_{r}");
    }
    csv.push('\n');
    for (i, b) in bins.iter().enumerate() {
        let t = (i + 1) as f64 * bin;
        let _ = write!(csv, "{t:.1}");
        for v in b {
            let _ = write!(csv, ",{v}");
        }
        let s = shares
            .iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .map(|(_, s)| s.clone());
        for r in 0..regions.len() {
            let v = s
                .as_ref()
                .and_then(|s| s[r])
                .map(|v| v.to_string())
                .unwrap_or_default();
            let _ = write!(csv, ",{v}");
        }
        csv.push('\n');
    }
    let path = out_dir().join(format!("{name}.csv"));
    std::fs::write(&path, csv).unwrap();
    path
}

/// Draws the PNG; `shift` marks when the load moved (seconds since start).
fn draw(
    path: &Path,
    title: &str,
    regions: &[String],
    bin: f64,
    rates: &[Vec<f64>],
    shares: &[ShareSample],
    shift: f64,
) {
    static FONT: Once = Once::new();
    FONT.call_once(|| {
        let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
    let root = BitMapBackend::new(path, (1200, 600)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let x_max = rates.len() as f64 * bin;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..L * 1.6)
        .unwrap();
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("admitted per second (1 s window)")
        .label_style(("sans-serif", 15))
        .draw()
        .unwrap();
    let limit = LineSeries::new([(0.0, L), (x_max, L)], RED.stroke_width(2));
    chart
        .draw_series(limit)
        .unwrap()
        .label("limit L")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    let shift_line = LineSeries::new([(shift, 0.0), (shift, L * 1.6)], BLACK.mix(0.5));
    chart
        .draw_series(shift_line)
        .unwrap()
        .label("load moves")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    for (r, name) in regions.iter().enumerate() {
        draw_region(&mut chart, r, name, bin, rates, shares);
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .unwrap();
    root.present().unwrap();
}

type Chart<'a> = ChartContext<
    'a,
    BitMapBackend<'a>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Region `r`'s admitted/s (bold) and share × L (light).
fn draw_region(
    chart: &mut Chart<'_>,
    r: usize,
    name: &str,
    bin: f64,
    rates: &[Vec<f64>],
    shares: &[ShareSample],
) {
    let colors = [BLUE, RGBColor(0, 150, 0), RGBColor(200, 100, 0)];
    let color = colors[r % colors.len()];
    let admitted = rates
        .iter()
        .enumerate()
        .map(|(i, v)| ((i + 1) as f64 * bin, v[r]));
    chart
        .draw_series(LineSeries::new(admitted, color.stroke_width(2)))
        .unwrap()
        .label(format!("admitted/s in {name}"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    let share = shares.iter().filter_map(|(t, s)| s[r].map(|v| (*t, v * L)));
    chart
        .draw_series(LineSeries::new(share, color.mix(0.45).stroke_width(1)))
        .unwrap()
        .label(format!("share of {name} × L"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.mix(0.45)));
}
