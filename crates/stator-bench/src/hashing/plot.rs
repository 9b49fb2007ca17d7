//! Figures 11 and 12 as one PNG, drawn with plotters.
//!
//! Text is rendered through fontconfig (plotters' `ttf` feature); on Debian the package
//! `fonts-dejavu-core` (in the Makefile's APT_PACKAGES) is enough for the "sans-serif" family.

use super::eval::Evaluation;
use crate::error::Result;
use plotters::prelude::*;
use std::path::Path;

const WIDTH: u32 = 1500;
const HEIGHT: u32 = 620;
const FONT: &str = "sans-serif";

const MAX_COLOR: RGBColor = RGBColor(31, 89, 160);
const MIN_COLOR: RGBColor = RGBColor(140, 190, 235);
const SMALL_COLOR: RGBColor = RGBColor(200, 60, 40);
const LARGE_COLOR: RGBColor = RGBColor(31, 89, 160);
const FLOOR_COLOR: RGBColor = RGBColor(110, 110, 110);

/// Draws the evaluation into `path` (PNG).
pub fn draw(eval: &Evaluation, path: &Path) -> Result<()> {
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    let fail = |e: &dyn std::fmt::Display| crate::BenchError::Failed {
        what: format!(
            "cannot draw {}: {e} (text needs a font: install fonts-dejavu-core)",
            path.display()
        ),
    };
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(WIDTH * 11 / 25);
    figure_11(eval, &left).map_err(|e| fail(&e))?;
    figure_12(eval, &right).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Grouped bars: for each method and size, the max and min percent of entries per backend.
fn figure_11(
    eval: &Evaluation,
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
) -> DrawResult {
    let rows = &eval.balance;
    let labels: Vec<String> = rows
        .iter()
        .map(|r| {
            let method = match r.method {
                "maglev" => "M",
                "karger" => "K",
                _ => "R",
            };
            format!("{method}-{}", size_name(r.table_size))
        })
        .collect();
    let top = rows.iter().map(|r| r.max_percent).fold(0.0, f64::max) * 1.15;
    let groups = rows.len() as f64;
    let mut chart = ChartBuilder::on(area)
        .caption("Figure 11: load balancing efficiency", (FONT, 24))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..groups - 0.5, 0.0..top.max(0.01))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(rows.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("Percent of entries per backend")
        .y_label_formatter(&|y| format!("{y:.3}"))
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .draw()?;
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let x = i as f64;
            Rectangle::new(
                [(x - 0.38, 0.0), (x - 0.02, r.max_percent)],
                MAX_COLOR.filled(),
            )
        }))?
        .label("max")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], MAX_COLOR.filled()));
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let x = i as f64;
            Rectangle::new(
                [(x + 0.02, 0.0), (x + 0.38, r.min_percent)],
                MIN_COLOR.filled(),
            )
        }))?
        .label("min")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], MIN_COLOR.filled()));
    let fair = 100.0 / eval.config.backends as f64;
    chart
        .draw_series(DashedLineSeries::new(
            [(-0.5, fair), (groups - 0.5, fair)],
            8,
            5,
            FLOOR_COLOR.stroke_width(2),
        ))?
        .label(format!("perfect balance ({fair:.3}%)"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], FLOOR_COLOR.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Lines: mean percent of changed entries against percent of failed backends, per table size.
fn figure_12(
    eval: &Evaluation,
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
) -> DrawResult {
    let rows = &eval.resilience;
    let x_max = rows
        .iter()
        .map(|r| r.failure_percent)
        .fold(0.0, f64::max)
        .max(1.0);
    let y_max = rows
        .iter()
        .map(|r| r.changed_percent_mean)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "Figure 12: resilience to backend failures ({} backends, {} runs per point)",
                eval.config.backends, eval.config.repetitions
            ),
            (FONT, 24),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("Concurrent backend failures (%)")
        .y_desc("Changed table entries (%)")
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .draw()?;
    let colors = [SMALL_COLOR, LARGE_COLOR];
    for (i, &size) in eval.config.sizes.iter().enumerate() {
        let color = colors[i % colors.len()];
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.table_size == size)
            .map(|r| (r.failure_percent, r.changed_percent_mean))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))?
            .label(format!("Maglev, M = {size} ({})", size_name(size)))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
        if points.len() <= 25 {
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
    }
    if let Some(&size) = eval.config.sizes.first() {
        let floor: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.table_size == size)
            .map(|r| (r.failure_percent, r.failed_entries_percent_mean))
            .collect();
        chart
            .draw_series(DashedLineSeries::new(
                floor,
                8,
                5,
                FLOOR_COLOR.stroke_width(2),
            ))?
            .label("failed backends' own entries (all that Karger / rendezvous move)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], FLOOR_COLOR.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The paper's names for its two sizes.
fn size_name(size: u32) -> String {
    match size {
        65_537 => "small".to_owned(),
        655_373 => "large".to_owned(),
        other => other.to_string(),
    }
}
