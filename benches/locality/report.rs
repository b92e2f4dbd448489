//! What a run of the harness leaves: a Markdown table per experiment and, for the sweeps, SVG
//! plots (throughput against servers per module; hit rate against cache size).

use super::experiments::{find, Experiment, SWEEP_CLIENTS};
use super::run::{RunResult, RunSpec};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;

pub fn table(results: &[RunResult]) -> String {
    let mut out = String::new();
    out.push_str(
        "| run | servers | switches | cache / working set | clients | req/s | vs wlc | vs all-hits \
         | hits | copies | max/mean load | max/mean requests | p50 ms | p99 ms | switch CPU | harness CPU | busiest CPU | busiest disk |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in results {
        let peer = |label: &str| {
            results.iter().find(|p| {
                p.spec.label == label
                    && p.spec.servers == r.spec.servers
                    && p.spec.clients == r.spec.clients
                    && p.spec.switches == 1
                    && (label == "all-hits" || p.spec.cache_bytes == r.spec.cache_bytes)
            })
        };
        let ratio = |label: &str| {
            peer(label).map_or("".to_string(), |p| {
                format!("{:.2}x", r.requests_per_s / p.requests_per_s.max(1e-9))
            })
        };
        let cache = if r.spec.label == "all-hits" {
            "all".to_string()
        } else {
            format!("{:.2}", cache_ratio(r))
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {:.1}% | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0}% | {:.0}% | {:.0}% | {:.0}% |",
            r.spec.label,
            r.spec.servers,
            r.spec.switches,
            cache,
            r.spec.clients,
            r.requests_per_s,
            ratio("wlc"),
            ratio("all-hits"),
            r.hit_rate * 100.0,
            r.copies_per_object,
            r.max_over_mean,
            r.requests_max_over_mean,
            r.p50_ms,
            r.p99_ms,
            r.switch_cpu_percent,
            r.harness_cpu_percent,
            r.max_cpu_busy_percent,
            r.max_disk_busy_percent,
        );
    }
    out
}

/// The cache of a run as a share of the working set it was sized from.
pub fn cache_ratio(r: &RunResult) -> f64 {
    r.spec.cache_ratio
}

/// The issue's goals against what was measured, one line each (`goals` and `fits`).
pub fn goals(experiment: Experiment, results: &[RunResult]) -> String {
    let mut out = String::new();
    let get = |label: &str| find(results, label, 1);
    let line = |out: &mut String, what: &str, value: f64, goal: &str, met: bool| {
        let _ = writeln!(
            out,
            "- {what}: {value:.2} (goal {goal}): {}",
            if met { "met" } else { "NOT met" }
        );
    };
    match experiment {
        Experiment::Goals => {
            if let (Some(lard), Some(wlc)) = (get("lard"), get("wlc")) {
                let x = lard.requests_per_s / wlc.requests_per_s;
                line(&mut out, "lard / wlc", x, ">= 2.8", x >= 2.8);
            }
            if let (Some(lard), Some(ceiling)) = (get("lard"), get("all-hits")) {
                let x = lard.requests_per_s / ceiling.requests_per_s;
                line(&mut out, "lard / all-hits", x, ">= 0.95", x >= 0.95);
            }
            if let Some(lard) = get("lard") {
                line(
                    &mut out,
                    "lard hits %",
                    lard.hit_rate * 100.0,
                    ">= 95",
                    lard.hit_rate >= 0.95,
                );
                line(
                    &mut out,
                    "lard max/mean load",
                    lard.max_over_mean,
                    "<= 1.15",
                    lard.max_over_mean <= 1.15,
                );
            }
            if let (Some(lr), Some(lard)) = (get("lard-r"), get("lard")) {
                let x = lr.requests_per_s / lard.requests_per_s;
                line(&mut out, "lard-r / lard", x, ">= 0.95", x >= 0.95);
                let p = lr.p99_ms / lard.p99_ms;
                line(&mut out, "lard-r p99 / lard p99", p, "<= 1.5", p <= 1.5);
            }
        }
        Experiment::Fits => {
            if let (Some(lard), Some(wlc)) = (get("lard"), get("wlc")) {
                let x = lard.requests_per_s / wlc.requests_per_s;
                line(
                    &mut out,
                    "lard / wlc, working set within one cache",
                    x,
                    ">= 0.98",
                    x >= 0.98,
                );
            }
        }
        Experiment::Sweep => sweep_goals(&mut out, results),
        Experiment::Switches => {
            for label in ["lard", "lard-r", "hash"] {
                let (Some(one), Some(four)) = (find(results, label, 1), find(results, label, 4))
                else {
                    continue;
                };
                line(
                    &mut out,
                    &format!("{label}, 4 switches: copies per cached object"),
                    four.copies_per_object,
                    "<= 1.2",
                    four.copies_per_object <= 1.2,
                );
                let points = (four.hit_rate - one.hit_rate) * 100.0;
                line(
                    &mut out,
                    &format!("{label}, 4 switches: hits against 1 switch, points"),
                    points,
                    ">= -1",
                    points >= -1.0,
                );
            }
        }
        _ => {}
    }
    out
}

/// The run of `label` with `clients` clients and caches of `ratio` times the working set
/// (the ceiling's ratio is ignored), one switch.
fn sweep_point<'r>(
    results: &'r [RunResult],
    label: &str,
    ratio: f64,
    clients: usize,
) -> Option<&'r RunResult> {
    results.iter().find(|r| {
        r.spec.label == label
            && r.spec.clients == clients
            && r.spec.switches == 1
            && (label == "all-hits" || (r.spec.cache_ratio - ratio).abs() < 1e-6)
    })
}

/// Issue 27's goals over the sweep, one line per load.
fn sweep_goals(out: &mut String, results: &[RunResult]) {
    let mut line = |what: String, value: f64, goal: &str, met: bool| {
        let _ = writeln!(
            out,
            "- {what}: {value:.2} (goal {goal}): {}",
            if met { "met" } else { "NOT met" }
        );
    };
    for clients in SWEEP_CLIENTS {
        let at = |label: &str, ratio: f64| sweep_point(results, label, ratio, clients);
        if let (Some(lard), Some(wlc)) = (at("lard", 1.0), at("wlc", 1.0)) {
            let x = lard.requests_per_s / wlc.requests_per_s;
            line(
                format!("{clients} clients, working set within one cache: lard / wlc"),
                x,
                ">= 0.98",
                x >= 0.98,
            );
        }
        if let (Some(lard), Some(wlc)) = (at("lard", 0.4), at("wlc", 0.4)) {
            if clients == 219 {
                let x = lard.requests_per_s / wlc.requests_per_s;
                line(
                    format!("{clients} clients, 2.5 caches: lard / wlc"),
                    x,
                    ">= 4",
                    x >= 4.0,
                );
            }
        }
        if let (Some(lard), Some(ceiling)) = (at("lard", 0.4), at("all-hits", 0.4)) {
            if clients >= 64 {
                let x = lard.requests_per_s / ceiling.requests_per_s;
                line(
                    format!("{clients} clients, 2.5 caches: lard / all-hits"),
                    x,
                    ">= 0.95",
                    x >= 0.95,
                );
            }
        }
        for ratio in [1.0, 0.4] {
            if let (Some(lr), Some(lard)) = (at("lard-r", ratio), at("lard", ratio)) {
                let cache = if ratio == 1.0 {
                    "one cache"
                } else {
                    "2.5 caches"
                };
                let x = lr.requests_per_s / lard.requests_per_s;
                line(
                    format!("{clients} clients, {cache}: lard-r / lard"),
                    x,
                    ">= 0.97",
                    x >= 0.97,
                );
                let p = lr.p99_ms / lard.p99_ms.max(1e-9);
                line(
                    format!("{clients} clients, {cache}: lard-r p99 / lard p99"),
                    p,
                    "<= 1.2",
                    p <= 1.2,
                );
            }
        }
    }
}

/// One colour per run label, the same in every plot.
fn colour_of(label: &str) -> RGBColor {
    match label {
        "wrr" => RGBColor(148, 103, 189),
        "wlc" => RGBColor(31, 119, 180),
        "lard" => RGBColor(44, 160, 44),
        "lard-r" => RGBColor(214, 39, 40),
        "hash" => RGBColor(255, 127, 14),
        _ => RGBColor(90, 90, 90),
    }
}

/// One line per label of `series`: (x, y) points, in the order of `labels`.
fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    legend: SeriesLabelPosition,
) -> Result<(), String> {
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_max, mut y_max) = (0.0f64, 0.0f64);
    let mut x_min = f64::MAX;
    for &(x, y) in points {
        x_max = x_max.max(x);
        x_min = x_min.min(x);
        y_max = y_max.max(y);
    }
    if x_min > x_max {
        return Ok(());
    }
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x_min..x_max * 1.02, 0.0..y_max * 1.1)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| e.to_string())?;
    for (label, points) in series {
        let colour = colour_of(label);
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                colour.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

fn series_by_label(
    results: &[RunResult],
    x: fn(&RunResult) -> f64,
    y: fn(&RunResult) -> f64,
) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in results.iter().filter(|r| r.spec.switches == 1) {
        match series.iter_mut().find(|(l, _)| *l == r.spec.label) {
            Some((_, points)) => points.push((x(r), y(r))),
            None => series.push((r.spec.label.clone(), vec![(x(r), y(r))])),
        }
    }
    series
}

/// The plots of an experiment, named after `stem` (`locality-servers.svg`, ...), if it has any;
/// returns the files written.
pub fn plots(
    experiment: Experiment,
    results: &[RunResult],
    dir: &Path,
    stem: &str,
) -> Result<Vec<String>, String> {
    match experiment {
        Experiment::Servers => {
            let file = dir.join(format!("{stem}.svg"));
            line_chart(
                &file,
                "Throughput against servers (cache per server = working set / 2.5)",
                "servers",
                "requests per second",
                &series_by_label(results, |r| r.spec.servers as f64, |r| r.requests_per_s),
                SeriesLabelPosition::UpperLeft,
            )?;
            Ok(vec![file.display().to_string()])
        }
        Experiment::Cache => {
            let file = dir.join(format!("{stem}.svg"));
            line_chart(
                &file,
                "Hit rate against cache size (4 servers)",
                "cache per server / working set",
                "hit rate, %",
                &series_by_label(results, cache_ratio, |r| r.hit_rate * 100.0),
                SeriesLabelPosition::LowerRight,
            )?;
            let throughput = dir.join(format!("{stem}-throughput.svg"));
            line_chart(
                &throughput,
                "Throughput against cache size (4 servers)",
                "cache per server / working set",
                "requests per second",
                &series_by_label(results, cache_ratio, |r| r.requests_per_s),
                SeriesLabelPosition::LowerRight,
            )?;
            Ok(vec![
                file.display().to_string(),
                throughput.display().to_string(),
            ])
        }
        Experiment::Switches => {
            let by_switches = |y: fn(&RunResult) -> f64| {
                let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
                for r in results {
                    let point = (r.spec.switches as f64, y(r));
                    match series.iter_mut().find(|(l, _)| *l == r.spec.label) {
                        Some((_, points)) => points.push(point),
                        None => series.push((r.spec.label.clone(), vec![point])),
                    }
                }
                series
            };
            let copies = dir.join(format!("{stem}.svg"));
            line_chart(
                &copies,
                "Copies of each cached object against switches sharing the clients (4 servers)",
                "switches",
                "copies per cached object",
                &by_switches(|r| r.copies_per_object),
                SeriesLabelPosition::UpperLeft,
            )?;
            let hits = dir.join(format!("{stem}-hits.svg"));
            line_chart(
                &hits,
                "Hit rate against switches sharing the clients (4 servers)",
                "switches",
                "hit rate, %",
                &by_switches(|r| r.hit_rate * 100.0),
                SeriesLabelPosition::LowerLeft,
            )?;
            Ok(vec![
                copies.display().to_string(),
                hits.display().to_string(),
            ])
        }
        Experiment::Sweep => {
            let mut written = Vec::new();
            for (ratio, name, title) in [
                (
                    1.0,
                    "fits",
                    "Throughput against clients, working set within one cache (4 servers)",
                ),
                (
                    0.4,
                    "cache",
                    "Throughput against clients, working set 2.5 caches (4 servers)",
                ),
            ] {
                let runs: Vec<RunResult> = results
                    .iter()
                    .filter(|r| {
                        (r.spec.label == "all-hits" && ratio < 1.0)
                            || (r.spec.cache_ratio - ratio).abs() < 1e-6
                    })
                    .cloned()
                    .collect();
                let file = dir.join(format!("{stem}-{name}.svg"));
                line_chart(
                    &file,
                    title,
                    "clients (requests in flight in the pool)",
                    "requests per second",
                    &series_by_label(&runs, |r| r.spec.clients as f64, |r| r.requests_per_s),
                    SeriesLabelPosition::LowerRight,
                )?;
                written.push(file.display().to_string());
            }
            Ok(written)
        }
        _ => Ok(Vec::new()),
    }
}

/// The runs of a table this module wrote (`locality-*.md`), with what the plots need (label,
/// servers, switches, cache ratio, req/s, hits), so plots can be redrawn without running again.
pub fn read_table(text: &str, template: &RunSpec) -> Vec<RunResult> {
    text.lines()
        .filter(|line| {
            line.starts_with("| ") && !line.starts_with("| run ") && !line.starts_with("| ---")
        })
        .filter_map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let number = |i: usize| {
                cells
                    .get(i)?
                    .trim_end_matches(['%', 'x'])
                    .parse::<f64>()
                    .ok()
            };
            let mut spec = template.clone();
            spec.label = cells.first()?.to_string();
            spec.servers = number(1)? as usize;
            spec.switches = number(2)? as usize;
            spec.cache_ratio = number(3).unwrap_or(0.0);
            spec.clients = number(4)? as usize;
            Some(RunResult {
                spec,
                requests_per_s: number(5)?,
                hit_rate: number(8)? / 100.0,
                copies_per_object: number(9)?,
                max_over_mean: number(10)?,
                requests_max_over_mean: number(11)?,
                p50_ms: number(12)?,
                p99_ms: number(13)?,
                switch_cpu_percent: number(14)?,
                harness_cpu_percent: number(15)?,
                max_cpu_busy_percent: number(16)?,
                max_disk_busy_percent: number(17)?,
                per_server_requests: Vec::new(),
            })
        })
        .collect()
}
