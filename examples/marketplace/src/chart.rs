//! `--chart out.png`: our rows beside the book's, as two bar charts (operations per second,
//! and wait per purchase), drawn with plotters in pure Rust. The text uses DejaVu Sans from
//! the `dejavu` crate, so no system font library is needed.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::Report;

/// Why the chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw the chart: {0}")]
pub struct ChartError(String);

const WIDTH: u32 = 1600;
const HEIGHT: u32 = 760;
const FONT: &str = "sans-serif";
const OURS: RGBColor = RGBColor(31, 119, 180);
const BOOK: RGBColor = RGBColor(255, 127, 14);

fn register_font() -> Result<(), ChartError> {
    static LOADED: OnceLock<bool> = OnceLock::new();
    let loaded = *LOADED.get_or_init(|| {
        let regular =
            plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let bold = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
        regular.is_ok() && bold.is_ok()
    });
    if loaded {
        Ok(())
    } else {
        Err(ChartError("the bundled DejaVu font did not load".into()))
    }
}

/// One bar group: a row's short label, and the values to compare.
struct Bars {
    /// Configuration and mode, drawn on two lines.
    label: (String, String),
    ours: f64,
    ours_p99: Option<f64>,
    book: Option<f64>,
}

/// Draws `report` to the PNG at `path`.
pub fn draw(report: &Report, path: &Path) -> Result<(), ChartError> {
    register_font()?;
    let fail = |err: &dyn std::fmt::Display| ChartError(err.to_string());
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let canvas = root.clone();
    let title = format!(
        "Redis in Action, tables 6.2 and 6.3: ours ({} s per row) vs the book (60 s per row)",
        report.seconds_per_row
    );
    let root = root
        .titled(&title, (FONT, 26).into_font().style(FontStyle::Bold))
        .map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(WIDTH / 2);

    let short = |row: &crate::report::ReportRow| {
        (
            format!("{}L/{}B", row.result.listers, row.result.buyers),
            row.result.mode.book_label().to_owned(),
        )
    };
    let ops: Vec<Bars> = report
        .rows
        .iter()
        .map(|row| Bars {
            label: short(row),
            ours: row.result.ops_per_sec,
            ours_p99: None,
            book: row.book.map(|b| b.ops_per_sec()),
        })
        .collect();
    let waits: Vec<Bars> = report
        .rows
        .iter()
        .map(|row| Bars {
            label: short(row),
            ours: row.result.wait.mean_ms,
            ours_p99: Some(row.result.wait.p99_ms),
            book: row.book.map(|b| b.avg_wait_ms.value),
        })
        .collect();
    panel(
        &canvas,
        &left,
        "List + buy operations per second",
        "operations / s",
        &ops,
    )
    .map_err(|e| fail(&e))?;
    panel(
        &canvas,
        &right,
        "Average wait per purchase (tick: our p99)",
        "milliseconds",
        &waits,
    )
    .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

fn panel(
    canvas: &DrawingArea<BitMapBackend<'_>, Shift>,
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    caption: &str,
    unit: &str,
    bars: &[Bars],
) -> Result<(), Box<dyn std::error::Error>> {
    let values = bars
        .iter()
        .flat_map(|b| [Some(b.ours), b.ours_p99, b.book])
        .flatten()
        .filter(|v| *v > 0.0);
    let (low, high) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (low, high) = if low > high {
        (0.01, 1.0)
    } else {
        (decade_below(low), decade_above(high))
    };
    let n = bars.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 20))
        .margin(14)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), (low..high).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_desc(unit)
        .y_label_formatter(&|y| format_axis(*y))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()?;
    // Two-line labels under each group, drawn on the whole canvas in pixels.
    let centered = |size: u32| {
        (FONT, size)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Top))
    };
    for (i, bar) in bars.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64, low));
        canvas.draw(&Text::new(bar.label.0.clone(), (x, y + 8), centered(14)))?;
        canvas.draw(&Text::new(bar.label.1.clone(), (x, y + 26), centered(14)))?;
    }

    let width = 0.36;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            let x = i as f64;
            Rectangle::new([(x - width, low), (x, b.ours.max(low))], OURS.filled())
        }))?
        .label("ours")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], OURS.filled()));
    chart
        .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
            let x = i as f64;
            b.book
                .map(|v| Rectangle::new([(x, low), (x + width, v.max(low))], BOOK.filled()))
        }))?
        .label("book")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], BOOK.filled()));
    chart.draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
        let x = i as f64;
        b.ours_p99.map(|p99| {
            PathElement::new(
                vec![(x - width, p99.max(low)), (x, p99.max(low))],
                BLACK.stroke_width(3),
            )
        })
    }))?;
    for (i, b) in bars.iter().enumerate() {
        if b.book.is_none() {
            chart.draw_series(std::iter::once(Text::new(
                "n/a",
                (i as f64 + 0.04, low * 1.15),
                (FONT, 12).into_font().color(&BOOK),
            )))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 15))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()?;
    Ok(())
}

fn decade_below(v: f64) -> f64 {
    10f64.powf(v.log10().floor())
}

fn decade_above(v: f64) -> f64 {
    let up = 10f64.powf(v.log10().ceil());
    if up <= v {
        up * 10.0
    } else {
        up
    }
}

fn format_axis(y: f64) -> String {
    if y >= 1000.0 {
        crate::report::thousands(y.round() as u64)
    } else if y >= 1.0 {
        format!("{y:.0}")
    } else {
        let text = format!("{y:.3}");
        text.trim_end_matches('0').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_axes_span_whole_decades() {
        assert_eq!(decade_below(0.31), 0.1);
        assert_eq!(decade_below(4500.0), 1000.0);
        assert_eq!(decade_above(4500.0), 10_000.0);
        assert_eq!(decade_above(1000.0), 10_000.0);
        assert_eq!(format_axis(10_000.0), "10,000");
        assert_eq!(format_axis(0.01), "0.01");
        assert_eq!(format_axis(10.0), "10");
    }

    #[test]
    fn the_bundled_font_loads() {
        register_font().unwrap();
    }
}
