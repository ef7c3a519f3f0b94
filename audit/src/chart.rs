//! The topic page's chart: each tier's count per window as an SVG line chart (colour, dash
//! and marker per tier, so it reads without colour too), with a band behind every window the
//! audit flagged, and its legend. Server-rendered: no script.

use std::fmt::Write;

use events::audit::Tier;

use crate::html::{self, escape, number};
use crate::ledger::{Ledger, Verdict, WindowReport};

/// How each tier is drawn in the chart: colour, dash pattern and marker.
fn tier_style(tier: Tier) -> (&'static str, &'static str, &'static str) {
    match tier {
        Tier::Accepted => ("#009E73", "1 2", "ring"),
        Tier::Agent => ("#1F2933", "", "circle"),
        Tier::Live => ("#56B4E9", "7 4", "square"),
        Tier::Mirror => ("#E69F00", "2 3", "triangle"),
        Tier::Loader => ("#CC79A7", "10 3 2 3", "diamond"),
    }
}

fn marker(shape: &str, x: f64, y: f64, colour: &str) -> String {
    match shape {
        "square" => format!(
            r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="{colour}"/>"#,
            x - 3.5,
            y - 3.5
        ),
        "triangle" => format!(
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{colour}"/>"#,
            x,
            y - 4.5,
            x - 4.5,
            y + 3.5,
            x + 4.5,
            y + 3.5
        ),
        "diamond" => format!(
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{colour}"/>"#,
            x,
            y - 5.0,
            x + 5.0,
            y,
            x,
            y + 5.0,
            x - 5.0,
            y
        ),
        "ring" => format!(
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="4.5" fill="none" stroke="{colour}" stroke-width="2"/>"#
        ),
        _ => format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.8" fill="{colour}"/>"#),
    }
}

/// The y axis for values up to `max`: a round tick step (1, 2 or 5 times a power of ten) and
/// the top, at most five steps and 5 % above `max`.
fn axis(max: i64) -> (i64, i64) {
    let target = max.saturating_add(max / 20).max(1);
    let mut power = 1i64;
    loop {
        for factor in [1, 2, 5] {
            let step = power.saturating_mul(factor);
            if step.saturating_mul(5) >= target || step == i64::MAX {
                let ticks = (target + step - 1) / step;
                return (step, step.saturating_mul(ticks));
            }
        }
        power = power.saturating_mul(10);
    }
}

/// Counts per tier over the windows, as an SVG line chart; flagged windows get a band.
pub(crate) fn chart(ledger: &Ledger, topic: &str, reports: &[WindowReport], secs: bool) -> String {
    let (width, height) = (1100.0_f64, 320.0_f64);
    let (left, right, top, bottom) = (70.0, 20.0, 16.0, 44.0);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let tiers = ledger.active_tiers();
    let max = reports.iter().flat_map(|r| r.tiers.values().copied()).max().unwrap_or(0);
    let (y_step, y_top) = axis(max);
    let y_max = y_top as f64;
    let n = reports.len().max(1);
    let step = plot_w / n as f64;
    let x_of = |i: usize| left + step * (i as f64 + 0.5);
    let y_of = |v: i64| top + plot_h - plot_h * (v as f64 / y_max);

    let mut svg = format!(
        r#"<svg id="chart" role="img" aria-label="events per tier and window for {t}" viewBox="0 0 {width} {height}" width="100%" xmlns="http://www.w3.org/2000/svg">"#,
        t = escape(topic)
    );
    // Bands behind flagged windows.
    for (i, report) in reports.iter().enumerate() {
        let colour = match report.verdict {
            Verdict::Loss => "#D55E00",
            Verdict::Duplication => "#0072B2",
            _ => continue,
        };
        let _ = write!(
            svg,
            r#"<rect class="band" data-window="{}" data-verdict="{}" x="{:.1}" y="{top}" width="{:.1}" height="{plot_h}" fill="{colour}" fill-opacity="0.13"/>"#,
            report.window_start,
            report.verdict.as_str(),
            left + step * i as f64,
            step
        );
    }
    // Horizontal grid and y labels.
    for value in (0..=y_top).step_by(y_step as usize) {
        let y = y_of(value);
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#E3E7EC"/><text x="{:.1}" y="{:.1}" font-size="12" fill="#5F6B7A" text-anchor="end">{}</text>"##,
            left + plot_w,
            left - 8.0,
            y + 4.0,
            number(value)
        );
    }
    // X labels, thinned to about ten.
    let every = n.div_ceil(10).max(1);
    for (i, report) in reports.iter().enumerate().filter(|(i, _)| i % every == 0) {
        let (_, time) = html::utc_parts(report.window_start, secs);
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" fill="#5F6B7A" text-anchor="middle">{time}</text>"##,
            x_of(i),
            top + plot_h + 20.0
        );
    }
    let _ = write!(
        svg,
        r##"<line x1="{left}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#9AA5B1"/><text x="{:.1}" y="{:.1}" font-size="12" fill="#5F6B7A" text-anchor="middle">window start (UTC)</text>"##,
        left + plot_w,
        top + plot_h,
        top + plot_h,
        left + plot_w / 2.0,
        height - 4.0
    );
    // One line per tier, the reference first and widest, so the dashed lines of the tiers that
    // agree with it show on top of it.
    for (i, tier) in tiers.iter().enumerate() {
        let width = if i == 0 { 4.0 } else { 2.4 };
        let (colour, dash, shape) = tier_style(*tier);
        let points: Vec<(f64, f64)> = reports
            .iter()
            .enumerate()
            .map(|(i, r)| (x_of(i), y_of(r.tiers.get(tier.as_str()).copied().unwrap_or(0))))
            .collect();
        let path: Vec<String> = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(
            svg,
            r#"<polyline class="series" data-tier="{}" points="{}" fill="none" stroke="{colour}" stroke-width="{width}" stroke-dasharray="{dash}" stroke-linejoin="round"/>"#,
            tier.as_str(),
            path.join(" ")
        );
        for (x, y) in points {
            svg.push_str(&marker(shape, x, y, colour));
        }
    }
    svg.push_str("</svg>");
    svg
}

pub(crate) fn chart_legend(tiers: &[Tier]) -> String {
    let mut out = String::from(r#"<div class="chart-legend">"#);
    for tier in tiers {
        let (colour, dash, shape) = tier_style(*tier);
        let _ = write!(
            out,
            r#"<span><svg width="34" height="12"><line x1="1" x2="33" y1="6" y2="6" stroke="{colour}" stroke-width="2.4" stroke-dasharray="{dash}"/>{}</svg>{}</span>"#,
            marker(shape, 17.0, 6.0, colour),
            tier.as_str()
        );
    }
    out.push_str(r##"<span><svg width="20" height="12"><rect width="20" height="12" fill="#D55E00" fill-opacity="0.13"/></svg>loss window</span></div>"##);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_axis_has_round_steps_and_headroom() {
        assert_eq!(axis(315), (100, 400));
        assert_eq!(axis(290), (100, 400), "5 % headroom over 290 passes 300");
        assert_eq!(axis(0), (1, 1));
        assert_eq!(axis(7), (2, 8));
        assert_eq!(axis(1_000_000), (500_000, 1_500_000));
    }
}
