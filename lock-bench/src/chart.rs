//! PNG charts, drawn with plotters in pure Rust: S1 latency percentiles and S3 hand-off gaps
//! by contender, as grouped bars on a log scale with min–max whiskers over the repetitions.
//! Text uses DejaVu Sans from the `dejavu` crate, so no system font library is needed.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::{s1_title, s3_title, Report};
use crate::scenarios::{s1_latency, s3_hot};
use crate::stats::Spread;

const FONT: &str = "sans-serif";
const PANEL: (u32, u32) = (1400, 760);
const PALETTE: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// One bar: the median over repetitions, its min–max, and an optional tick (e.g. p99).
#[derive(Debug, Clone, Copy)]
struct Bar {
    spread: Spread,
    tick: Option<f64>,
}

struct Series {
    name: String,
    bars: Vec<Option<Bar>>,
}

struct Panel {
    title: String,
    unit: String,
    note: String,
    groups: Vec<String>,
    series: Vec<Series>,
}

fn register_font() -> Result<(), String> {
    static LOADED: OnceLock<bool> = OnceLock::new();
    let ok = *LOADED.get_or_init(|| {
        let regular =
            plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let bold = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
        regular.is_ok() && bold.is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err("the bundled DejaVu font did not load".into())
    }
}

fn s1_panel(table: &s1_latency::Table) -> Panel {
    type Pick = fn(&s1_latency::Row) -> Spread;
    let percentiles: [(&str, Pick); 4] = [
        ("p50", |r| r.p50_us),
        ("p90", |r| r.p90_us),
        ("p99", |r| r.p99_us),
        ("p99.9", |r| r.p999_us),
    ];
    Panel {
        title: s1_title(),
        unit: "µs per lock + release (log scale)".into(),
        note: "bar: median over repetitions; whisker: min–max".into(),
        groups: table.rows.iter().map(|r| r.contender.clone()).collect(),
        series: percentiles
            .iter()
            .map(|(name, pick)| Series {
                name: (*name).into(),
                bars: table
                    .rows
                    .iter()
                    .map(|row| {
                        Some(Bar {
                            spread: pick(row),
                            tick: None,
                        })
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn s3_panel(table: &s3_hot::Table) -> Panel {
    let mut groups: Vec<String> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    for row in &table.rows {
        if !groups.contains(&row.contender) {
            groups.push(row.contender.clone());
        }
        if !counts.contains(&row.contenders) {
            counts.push(row.contenders);
        }
    }
    let series = counts
        .iter()
        .map(|&n| Series {
            name: format!("N={n}"),
            bars: groups
                .iter()
                .map(|group| {
                    table
                        .rows
                        .iter()
                        .find(|r| &r.contender == group && r.contenders == n)
                        .map(|r| Bar {
                            spread: r.handoff_p50_us,
                            tick: Some(r.handoff_p99_us.median),
                        })
                })
                .collect(),
        })
        .collect();
    Panel {
        title: s3_title(),
        unit: "hand-off gap, µs (log scale)".into(),
        note: "bar: p50 (median over repetitions, whisker min–max); black tick: p99".into(),
        groups,
        series,
    }
}

/// S1 latency percentiles by contender.
pub fn draw_s1(table: &s1_latency::Table, path: &Path) -> Result<(), String> {
    draw(&[s1_panel(table)], path)
}

/// S3 hand-off gap by contender and N.
pub fn draw_s3(table: &s3_hot::Table, path: &Path) -> Result<(), String> {
    draw(&[s3_panel(table)], path)
}

/// Both charts side by side in one PNG (those measured in this run).
pub fn draw_combined(report: &Report, path: &Path) -> Result<(), String> {
    let mut panels = Vec::new();
    if let Some(s1) = &report.s1 {
        panels.push(s1_panel(s1));
    }
    if let Some(s3) = &report.s3 {
        panels.push(s3_panel(s3));
    }
    if panels.is_empty() {
        return Err("no S1 or S3 figures to chart in this run".into());
    }
    draw(&panels, path)
}

fn draw(panels: &[Panel], path: &Path) -> Result<(), String> {
    register_font()?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    }
    let fail = |err: &dyn std::fmt::Display| format!("cannot draw {}: {err}", path.display());
    let width = PANEL.0 * panels.len() as u32;
    let root = BitMapBackend::new(path, (width, PANEL.1)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let areas = root.split_evenly((1, panels.len()));
    for (panel, area) in panels.iter().zip(&areas) {
        draw_panel(area, panel).map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    panel: &Panel,
) -> Result<(), Box<dyn std::error::Error>> {
    let values = panel
        .series
        .iter()
        .flat_map(|s| s.bars.iter().flatten())
        .flat_map(|b| [b.spread.min, b.spread.max, b.tick.unwrap_or(f64::NAN)])
        .filter(|v| v.is_finite() && *v > 0.0);
    let (low, high) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (low, high) = if low > high {
        (1.0, 10.0)
    } else {
        (decade_below(low), decade_above(high))
    };
    let groups = panel.groups.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, (FONT, 22).into_font().style(FontStyle::Bold))
        .margin(16)
        .margin_right(28)
        .x_label_area_size(84)
        .y_label_area_size(90)
        .build_cartesian_2d(-0.5f64..(groups as f64 - 0.5), (low..high).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_desc(panel.unit.as_str())
        .y_label_formatter(&|y| format_axis(*y))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .draw()?;

    // Group labels, wrapped, under each group.
    let label_style = (FONT, 15)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    for (i, group) in panel.groups.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64, low));
        for (line_no, line) in wrap(group, 22).iter().enumerate() {
            area.draw(&Text::new(
                line.clone(),
                (
                    x - area.get_base_pixel().0,
                    y + 8 + 19 * line_no as i32 - area.get_base_pixel().1,
                ),
                label_style.clone(),
            ))?;
        }
    }

    let slots = panel.series.len().max(1) as f64;
    let width = 0.8 / slots;
    for (s, series) in panel.series.iter().enumerate() {
        let color = PALETTE[s % PALETTE.len()];
        let offset = -0.4 + width * s as f64;
        let bars: Vec<(f64, Bar)> = series
            .bars
            .iter()
            .enumerate()
            .filter_map(|(i, bar)| bar.map(|b| (i as f64 + offset, b)))
            .filter(|(_, b)| b.spread.median.is_finite())
            .collect();
        chart
            .draw_series(bars.iter().map(|(x, b)| {
                Rectangle::new(
                    [
                        (*x + 0.1 * width, low),
                        (*x + 0.9 * width, b.spread.median.max(low)),
                    ],
                    color.filled(),
                )
            }))?
            .label(series.name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        // Min–max whiskers over the repetitions.
        chart.draw_series(
            bars.iter()
                .filter(|(_, b)| b.spread.max > b.spread.min)
                .map(|(x, b)| {
                    let mid = *x + 0.5 * width;
                    PathElement::new(
                        vec![(mid, b.spread.min.max(low)), (mid, b.spread.max.max(low))],
                        BLACK.mix(0.6).stroke_width(2),
                    )
                }),
        )?;
        chart.draw_series(bars.iter().filter_map(|(x, b)| {
            b.tick.filter(|t| t.is_finite()).map(|tick| {
                PathElement::new(
                    vec![
                        (*x + 0.1 * width, tick.max(low)),
                        (*x + 0.9 * width, tick.max(low)),
                    ],
                    BLACK.stroke_width(3),
                )
            })
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 15))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()?;
    let (_, height) = area.dim_in_pixel();
    area.draw(&Text::new(
        panel.note.clone(),
        (24, height as i32 - 22),
        (FONT, 14).into_font().color(&BLACK.mix(0.7)),
    ))?;
    Ok(())
}

/// Splits `text` into lines of at most about `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_owned()),
        }
    }
    lines
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
    if y >= 1.0 {
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
    fn wraps_at_spaces() {
        assert_eq!(
            wrap("lock-core Locker + auto_renew()", 18),
            vec!["lock-core Locker +", "auto_renew()"]
        );
        assert_eq!(wrap("raw", 10), vec!["raw"]);
    }

    #[test]
    fn log_axes_span_whole_decades() {
        assert_eq!(decade_below(31.0), 10.0);
        assert_eq!(decade_above(4500.0), 10_000.0);
        assert_eq!(decade_above(1000.0), 10_000.0);
    }

    #[test]
    fn the_bundled_font_loads() {
        assert!(register_font().is_ok());
    }
}
