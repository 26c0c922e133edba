//! The two pictures of `towerrec partition` (DMT Figure 9): the interaction matrix with
//! the features ordered by tower and each tower's block outlined, and the features'
//! embedding coloured by tower. SVG only, like the simulator's plots.

use anyhow::{anyhow, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;
use towerrec_plan::partition::{Embedding, Matrix};
use towerrec_sim::plot::PALETTE;

/// Beyond this many features a side the heatmap shows block means, not single pairs
/// (a cell per pair of a thousand features would be a million SVG rectangles).
const MAX_CELLS: usize = 200;
/// Up to this many features their names are written.
const MAX_NAMES: usize = 64;

/// Tower `t` of `n`: the palette for a few towers, hues around the circle for more.
fn tower_color(t: usize, n: usize) -> RGBColor {
    if n <= PALETTE.len() {
        return PALETTE[t];
    }
    // Hues a golden-ratio step apart: neighbouring towers get unlike colours.
    let (r, g, b) = HSLColor((t as f64 * 0.618_034).fract(), 0.7, 0.45).rgb();
    RGBColor(r, g, b)
}

/// White at 0 to dark blue at 1 (clamped).
fn heat(v: f64) -> RGBColor {
    let v = v.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * v).round() as u8;
    RGBColor(lerp(255.0, 8.0), lerp(255.0, 48.0), lerp(255.0, 107.0))
}

type Drawn = std::result::Result<(), Box<dyn std::error::Error>>;

fn write(path: &Path, draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Drawn) -> Result<()> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (820, 760)).into_drawing_area();
        let drawn = root
            .fill(&WHITE)
            .map_err(Into::into)
            .and_then(|()| draw(&root));
        drawn
            .and_then(|()| root.present().map_err(Into::into))
            .map_err(|e| anyhow!("drawing {}: {e}", path.display()))?;
    }
    towerrec_core::fsio::write_atomic(path, svg.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// A square matrix with rows and columns in group order (towers, hosts), each group's
/// block outlined; colours span the off-diagonal values. `title` heads it.
pub fn heatmap(
    path: &Path,
    matrix: &Matrix,
    groups: &[Vec<usize>],
    names: &[String],
    title: &str,
) -> Result<()> {
    let order: Vec<usize> = groups.iter().flatten().copied().collect();
    let f = order.len();
    let cells = f.min(MAX_CELLS);
    // Cell k covers features [k·f/cells, (k+1)·f/cells) of the order.
    let span = |k: usize| (k * f / cells, ((k + 1) * f / cells).max(k * f / cells + 1));
    let mut values = Vec::with_capacity(cells * cells);
    for r in 0..cells {
        for c in 0..cells {
            let ((r0, r1), (c0, c1)) = (span(r), span(c));
            let mut sum = 0.0;
            for &i in &order[r0..r1] {
                for &j in &order[c0..c1] {
                    sum += matrix.get(i, j);
                }
            }
            values.push(sum / ((r1 - r0) * (c1 - c0)) as f64);
        }
    }
    // The diagonal is 1 where a feature is ever non-zero: the colours span the pairs'
    // values instead, so that the structure between features shows.
    let pairs = (0..f)
        .flat_map(|i| (0..f).filter(move |&j| j != i).map(move |j| (i, j)))
        .map(|(i, j)| matrix.get(i, j));
    let (vmin, vmax) = pairs.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (vmin, vmax) = if vmax > vmin {
        (vmin, vmax)
    } else {
        (0.0, 1.0)
    };
    let scale = cells as f64 / f.max(1) as f64;
    let top = |p: f64| cells as f64 - p;
    let show_names = f <= MAX_NAMES;
    let font = (700.0 / f.max(1) as f64).clamp(6.0, 12.0);
    write(path, |root| {
        let room = if show_names { 60 } else { 12 };
        let area = root.titled(
            &format!("{title}; white ≤ {vmin:.3}, blue ≥ {vmax:.3}"),
            ("sans-serif", 16),
        )?;
        let mut chart = ChartBuilder::on(&area)
            .margin(10)
            .margin_left(room)
            .margin_top(room)
            .margin_right(room.max(30))
            .build_cartesian_2d(0.0..cells as f64, 0.0..cells as f64)?;
        chart.draw_series(values.iter().enumerate().map(|(k, &v)| {
            let (r, c) = ((k / cells) as f64, (k % cells) as f64);
            Rectangle::new(
                [(c, top(r)), (c + 1.0, top(r + 1.0))],
                heat((v - vmin) / (vmax - vmin)).filled(),
            )
        }))?;
        let mut start = 0usize;
        for (t, group) in groups.iter().enumerate() {
            let (a, b) = (start as f64 * scale, (start + group.len()) as f64 * scale);
            let color = tower_color(t, groups.len());
            chart.draw_series(std::iter::once(Rectangle::new(
                [(a, top(a)), (b, top(b))],
                color.stroke_width(2),
            )))?;
            start += group.len();
        }
        if show_names {
            let mut group_of = vec![0; names.len()];
            for (t, group) in groups.iter().enumerate() {
                for &g in group {
                    group_of[g] = t;
                }
            }
            for (p, &g) in order.iter().enumerate() {
                let color = tower_color(group_of[g], groups.len());
                let style = |pos| {
                    TextStyle::from(("sans-serif", font).into_font())
                        .color(&color)
                        .pos(pos)
                };
                let (x, y) = chart.backend_coord(&(0.0, top(p as f64 + 0.5)));
                root.draw(&Text::new(
                    names[g].as_str(),
                    (x - 4, y),
                    style(Pos::new(HPos::Right, VPos::Center)),
                ))?;
                let (x, y) = chart.backend_coord(&(p as f64 + 0.5, top(0.0)));
                root.draw(&Text::new(
                    names[g].as_str(),
                    (x, y - 4),
                    style(Pos::new(HPos::Left, VPos::Center)).transform(FontTransform::Rotate270),
                ))?;
            }
        }
        Ok(())
    })
}

/// The features' first two coordinates (one: on a line), coloured by tower.
pub fn scatter(
    path: &Path,
    embedding: &Embedding,
    towers: &[Vec<usize>],
    names: &[String],
    title: &str,
) -> Result<()> {
    let point = |g: usize| {
        let p = embedding.point(g);
        (p[0], p.get(1).copied().unwrap_or(0.0))
    };
    let f = embedding.features();
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for g in 0..f {
        let (x, y) = point(g);
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    // One span for both axes, so that distances look as they are.
    let half = ((x1 - x0).max(y1 - y0) * 0.53).max(1e-3);
    let pad = |a: f64, b: f64| {
        let mid = (a + b) / 2.0;
        (mid - half)..(mid + half)
    };
    let axes = match embedding.dims {
        1 => "dimension 1 of 1".to_string(),
        2 => "the plane".to_string(),
        n => format!("dimensions 1 and 2 of {n}"),
    };
    write(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                format!("features embedded by distance, {axes}: {title}"),
                ("sans-serif", 16),
            )
            .margin(14)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(pad(x0, x1), pad(y0, y1))?;
        chart
            .configure_mesh()
            .light_line_style(WHITE.mix(0.0))
            .x_label_formatter(&|v| format!("{v:.2}"))
            .y_label_formatter(&|v| format!("{v:.2}"))
            .draw()?;
        for (t, tower) in towers.iter().enumerate() {
            let color = tower_color(t, towers.len());
            let series = chart.draw_series(
                tower
                    .iter()
                    .map(|&g| Circle::new(point(g), 5, color.filled())),
            )?;
            if towers.len() <= 16 {
                series
                    .label(format!("tower {t} ({})", tower.len()))
                    .legend(move |(x, y)| Circle::new((x + 6, y), 5, color.filled()));
            }
            if f <= MAX_NAMES {
                chart.draw_series(tower.iter().map(|&g| {
                    Text::new(
                        names[g].clone(),
                        point(g),
                        TextStyle::from(("sans-serif", 10).into_font())
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Left, VPos::Bottom)),
                    )
                }))?;
            }
        }
        if towers.len() <= 16 {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        Ok(())
    })
}
