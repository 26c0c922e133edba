//! SVG plots of simulations: line charts (QPS against collective latency and
//! bandwidth, speedup against scale) and stacked time breakdowns; the same charts as
//! SVG text for pages that inline them (run reports, docs/REPORT.md). SVG only, so no
//! fonts or image libraries are needed; text is left to the viewer.

use crate::error::{Error, Result};
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// One named line of (x, y) points.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// A chart: title, axis labels, lines; `log_x` for a base-2 logarithmic x axis; the y
/// axis from 0 (`y_from_zero`) or fitted to the points' range (a loss that moves little).
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub log_x: bool,
    pub y_from_zero: bool,
}

/// The colours of series, in order (matplotlib's ten).
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn plot_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Plot {
        path: path.into(),
        reason: e.to_string(),
    }
}

/// Draws `charts` side by side in a grid of `columns` columns into `path`.
pub fn line_charts(path: &Path, charts: &[LineChart], columns: usize) -> Result<()> {
    let svg = line_charts_svg(charts, columns).map_err(|e| plot_err(path, e))?;
    write_svg(path, &svg)
}

/// [`line_charts`], as SVG text.
pub fn line_charts_svg(charts: &[LineChart], columns: usize) -> Result<String> {
    let columns = columns.clamp(1, charts.len().max(1));
    let rows = charts.len().div_ceil(columns);
    // Charts with many lines get their legend in a column of its own, beside the plot.
    let legend = if charts.iter().any(outside_legend) {
        LEGEND_WIDTH
    } else {
        0
    };
    let size = ((480 + legend) * columns as u32, 360 * rows as u32);
    let title = charts.first().map_or("", |c| c.title.as_str());
    let err = |e: Box<dyn std::error::Error>| chart_err(title, e);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.into()))?;
        let areas = root.split_evenly((rows, columns));
        for (chart, area) in charts.iter().zip(areas.iter()) {
            draw_lines(chart, area).map_err(err)?;
        }
        root.present().map_err(|e| err(e.into()))?;
    }
    Ok(svg)
}

fn chart_err(title: &str, e: impl std::fmt::Display) -> Error {
    Error::Chart {
        title: title.to_string(),
        reason: e.to_string(),
    }
}

/// Writes a drawn SVG atomically (a temporary file renamed into place).
fn write_svg(path: &Path, svg: &str) -> Result<()> {
    towerrec_core::fsio::write_atomic(path, svg.as_bytes()).map_err(|e| plot_err(path, e))
}

fn bounds(chart: &LineChart) -> ((f64, f64), (f64, f64)) {
    let pts = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        return ((1.0, 2.0), (0.0, 1.0));
    }
    if x1 <= x0 {
        x1 = x0 * 2.0 + 1.0;
    }
    let y = if chart.y_from_zero {
        (0.0, if y1 > 0.0 { y1 * 1.08 } else { 1.0 })
    } else {
        // The points' range with a margin; a flat line gets one around its value.
        let pad = if y1 > y0 {
            (y1 - y0) * 0.08
        } else {
            y0.abs().max(1.0) * 0.05
        };
        (y0 - pad, y1 + pad)
    };
    ((x0, x1), y)
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Width of a legend drawn beside its chart.
const LEGEND_WIDTH: u32 = 190;

/// Whether `chart` has so many lines that a legend inside the plot would hide some.
fn outside_legend(chart: &LineChart) -> bool {
    chart.series.len() > 4
}

fn draw_lines(chart: &LineChart, cell: &DrawingArea<SVGBackend, Shift>) -> DrawResult {
    let ((x0, x1), (y0, y1)) = bounds(chart);
    let area = if outside_legend(chart) {
        let (width, _) = cell.dim_in_pixel();
        let (area, legend) = cell.split_horizontally(width.saturating_sub(LEGEND_WIDTH));
        let names: Vec<&str> = chart.series.iter().map(|s| s.label.as_str()).collect();
        draw_legend(&legend, &names)?;
        area
    } else {
        cell.clone()
    };
    let mut builder = ChartBuilder::on(&area);
    builder
        .caption(&chart.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56);
    let span = y1 - y0;
    if chart.log_x {
        let mut c = builder.build_cartesian_2d((x0..x1).log_scale().base(2.0), y0..y1)?;
        draw_series(&mut c, chart, span)
    } else {
        let mut c = builder.build_cartesian_2d(x0..x1, y0..y1)?;
        draw_series(&mut c, chart, span)
    }
}

/// Mesh, lines and legend of `chart` on a built chart, whatever its x axis.
fn draw_series<'a, X>(
    c: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, RangedCoordf64>>,
    chart: &LineChart,
    y_span: f64,
) -> DrawResult
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    c.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .x_label_formatter(&|x| format!("{x}"))
        .y_label_formatter(&|y| tick(*y, y_span))
        .draw()?;
    for (i, s) in chart.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        c.draw_series(LineSeries::new(
            s.points.iter().copied(),
            color.stroke_width(2),
        ))?
        .label(s.label.as_str())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    if !outside_legend(chart) {
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// A tick label on an axis spanning `span`: as [`short`], with as many decimals as the
/// ticks' step needs below 1,000 (plotters puts at most about 10 ticks on an axis, so
/// the step is at least a tenth of the span), so that a narrow fitted axis, an AUC
/// from 0.785 to 0.795, does not repeat a label.
fn tick(v: f64, span: f64) -> String {
    let a = v.abs();
    if a >= 1e3 || a == 0.0 || span.is_nan() || span <= 0.0 {
        return short(v);
    }
    let needed = (-(span / 10.0).log10()).ceil().clamp(0.0, 6.0) as usize;
    let decimals = needed.max(if a >= 10.0 { 0 } else { 2 });
    format!("{v:.decimals$}")
}

/// 1234567 → "1.23M".
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}K", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// One stacked bar: a label and the share of each part.
pub struct Bar {
    pub label: String,
    pub parts: Vec<f64>,
}

/// Stacked bars of shares (each bar's parts are normalised to 1), `parts` naming the
/// segments: the paper's "relative duration of training phases".
pub fn stacked_shares(path: &Path, title: &str, parts: &[&str], bars: &[Bar]) -> Result<()> {
    let svg = stacked_bars_svg(title, "share of step time", parts, bars, true)
        .map_err(|e| plot_err(path, e))?;
    write_svg(path, &svg)
}

/// Stacked bars as SVG text: each bar's parts as they are (`shares` false, the y axis
/// labelled `y_label`) or normalised to 1 (`shares`).
pub fn stacked_bars_svg(
    title: &str,
    y_label: &str,
    parts: &[&str],
    bars: &[Bar],
    shares: bool,
) -> Result<String> {
    let width = 340 + 70 * bars.len() as u32;
    let err = |e: Box<dyn std::error::Error>| chart_err(title, e);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(e.into()))?;
        // The legend gets its own column so that it never hides a bar.
        let (chart, legend) = root.split_horizontally(width - 190);
        let style = Stacking { y_label, shares };
        draw_stacked(&chart, title, parts, bars, style).map_err(err)?;
        draw_legend(&legend, parts).map_err(err)?;
        root.present().map_err(|e| err(e.into()))?;
    }
    Ok(svg)
}

/// How stacked bars are scaled and labelled.
#[derive(Clone, Copy)]
struct Stacking<'a> {
    y_label: &'a str,
    shares: bool,
}

fn draw_stacked(
    root: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    parts: &[&str],
    bars: &[Bar],
    style: Stacking,
) -> DrawResult {
    let n = bars.len().max(2);
    let top = if style.shares {
        1.0
    } else {
        let tallest = bars.iter().map(|b| b.parts.iter().sum::<f64>());
        let tallest = tallest.fold(0.0f64, f64::max);
        if tallest > 0.0 {
            tallest * 1.08
        } else {
            1.0
        }
    };
    let mut c = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..top)?;
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let y_format = |y: &f64| {
        if style.shares {
            format!("{:.0}%", y * 100.0)
        } else {
            short(*y)
        }
    };
    c.configure_mesh()
        .disable_x_mesh()
        .y_desc(style.y_label)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_label_formatter(&y_format)
        .draw()?;
    for k in 0..parts.len() {
        let color = PALETTE[k % PALETTE.len()];
        let rects = bars.iter().enumerate().map(|(i, b)| {
            let total = if style.shares {
                b.parts.iter().sum::<f64>().max(f64::MIN_POSITIVE)
            } else {
                1.0
            };
            let below: f64 = b.parts[..k].iter().sum::<f64>() / total;
            let top = below + b.parts[k] / total;
            let mut r = Rectangle::new(
                [
                    (SegmentValue::Exact(i), below),
                    (SegmentValue::Exact(i + 1), top),
                ],
                color.filled(),
            );
            r.set_margin(0, 0, 8, 8);
            r
        });
        c.draw_series(rects)?;
    }
    Ok(())
}

fn draw_legend(area: &DrawingArea<SVGBackend, Shift>, parts: &[&str]) -> DrawResult {
    for (k, name) in parts.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let y = 60 + 24 * k as i32;
        area.draw(&Rectangle::new([(8, y - 6), (20, y + 6)], color.filled()))?;
        area.draw(&Text::new(
            name.to_string(),
            (26, y - 7),
            ("sans-serif", 13).into_font(),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_written_as_svg() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let path = dir.join("lines.svg");
        let chart = |log_x| LineChart {
            title: "QPS".into(),
            x_label: "latency (µs)".into(),
            y_label: "QPS".into(),
            series: vec![Series {
                label: "100 GB/s".into(),
                points: vec![(1.0, 10.0), (2.0, 5.0), (8.0, 1.0)],
            }],
            log_x,
            y_from_zero: true,
        };
        line_charts(&path, &[chart(false), chart(true)], 2).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("100 GB/s"));
        let path = dir.join("bars.svg");
        let bars = vec![
            Bar {
                label: "a".into(),
                parts: vec![1.0, 3.0],
            },
            Bar {
                label: "b".into(),
                parts: vec![2.0, 2.0],
            },
        ];
        stacked_shares(&path, "breakdown", &["x", "y"], &bars).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("<rect") && svg.contains("breakdown"));
        // Absolute bars: the axis reaches past the tallest bar (4), labelled as asked.
        let svg = stacked_bars_svg("ms", "ms per step", &["x", "y"], &bars, false).unwrap();
        assert!(
            svg.contains("ms per step") && svg.contains("\n4.00\n"),
            "{svg}"
        );
        // Text is escaped: a run named with markup stays text.
        let mut named = chart(false);
        named.series[0].label = "a<b & c".into();
        let svg = line_charts_svg(&[named], 1).unwrap();
        assert!(svg.contains("a&lt;b &amp; c") && !svg.contains("a<b"));
        assert_eq!(short(1_234_567.0), "1.23M");
        // A narrow axis gets the decimals its ticks need; a wide one keeps the short form.
        assert_eq!(tick(0.787, 0.01), "0.787");
        assert_eq!(tick(0.7875, 0.004), "0.7875");
        assert_eq!(tick(0.5, 1.0), "0.50");
        assert_eq!(tick(25.0, 100.0), "25");
        assert_eq!(tick(25.5, 5.0), "25.5");
        assert_eq!(tick(2500.0, 0.1), "2.5K");
        let mut narrow = chart(false);
        narrow.y_from_zero = false;
        narrow.series[0].points = vec![(1.0, 0.7851), (2.0, 0.7893), (3.0, 0.7948)];
        let svg = line_charts_svg(&[narrow], 1).unwrap();
        let labels: Vec<&str> = svg
            .lines()
            .filter(|l| l.starts_with("0.7") && l.len() <= 6)
            .collect();
        let mut unique = labels.clone();
        unique.dedup();
        assert!(labels.len() >= 3 && labels == unique, "{labels:?}");
        // Many lines: the legend moves beside the plot, in a wider picture.
        let few = line_charts_svg(&[chart(false)], 1).unwrap();
        assert!(few.contains("width=\"480\""), "{}", &few[..200]);
        let mut many = chart(false);
        many.series = (0..6)
            .map(|k| Series {
                label: format!("phase {k}"),
                points: vec![(1.0, k as f64), (2.0, k as f64 + 1.0)],
            })
            .collect();
        let svg = line_charts_svg(&[many], 1).unwrap();
        assert!(svg.contains("width=\"670\""), "{}", &svg[..200]);
        assert!((0..6).all(|k| svg.contains(&format!("phase {k}"))));
        // From zero, or fitted to the points with a margin.
        let mut fitted = chart(false);
        assert_eq!(bounds(&fitted).1, (0.0, 10.0 * 1.08));
        fitted.y_from_zero = false;
        let (y0, y1) = bounds(&fitted).1;
        assert!((y0 - (1.0 - 0.72)).abs() < 1e-12 && (y1 - (10.0 + 0.72)).abs() < 1e-12);
    }
}
