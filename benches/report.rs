//! Turns the medians printed by the comparison scripts into the table of BENCHMARKS.md and a
//! chart. Run by `benches/compare.sh`; by hand:
//!
//! ```sh
//! cargo bench --bench report -- benches/results/*.txt
//! ```
//!
//! Input: files with sections `## <scenario>` followed by lines `<target> rps=<n>
//! cpu_us_per_req=<n>` (peerbench.sh's summary format). Output: the part of BENCHMARKS.md
//! between `<!-- comparison:begin -->` and `<!-- comparison:end -->`, and
//! `benches/results/comparison.svg`.

use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
struct Row {
    target: String,
    rps: f64,
    cpu: Option<f64>,
}

#[derive(Debug, Clone)]
struct Scenario {
    title: String,
    rows: Vec<Row>,
}

impl Scenario {
    fn get(&self, target: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.target == target)
    }

    /// The lower CPU per request of HAProxy and nginx, where measured.
    fn best_peer_cpu(&self) -> Option<f64> {
        ["haproxy", "nginx"]
            .iter()
            .filter_map(|t| self.get(t).and_then(|r| r.cpu))
            .filter(|c| *c > 0.0)
            .reduce(f64::min)
    }
}

fn parse(text: &str) -> Vec<Scenario> {
    let mut scenarios: Vec<Scenario> = Vec::new();
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            scenarios.push(Scenario {
                title: title.trim().to_string(),
                rows: Vec::new(),
            });
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(target), Some(rps)) = (words.next(), words.next()) else {
            continue;
        };
        let Some(rps) = rps.strip_prefix("rps=").and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let cpu = words
            .next()
            .and_then(|w| w.strip_prefix("cpu_us_per_req="))
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|c| c.is_finite());
        if let Some(scenario) = scenarios.last_mut() {
            scenario.rows.push(Row {
                target: target.to_string(),
                rps,
                cpu,
            });
        }
    }
    scenarios.retain(|s| !s.rows.is_empty());
    scenarios
}

fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 => format!("{:.2}", a / b),
        _ => "–".to_string(),
    }
}

fn table(scenarios: &[Scenario]) -> String {
    let mut out = String::new();
    out += "| scenario | target | req/s | CPU µs/req | req/s ÷ HAProxy | req/s ÷ nginx | CPU ÷ better peer |\n";
    out += "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n";
    for s in scenarios {
        let haproxy = s.get("haproxy").map(|r| r.rps);
        let nginx = s.get("nginx").map(|r| r.rps);
        let best_cpu = s.best_peer_cpu();
        for (i, r) in s.rows.iter().enumerate() {
            let name = if i == 0 { s.title.as_str() } else { "" };
            let ours = r.target.starts_with("tcpvs");
            let (bold_open, bold_close) = if ours { ("**", "**") } else { ("", "") };
            let cpu = r.cpu.map_or("–".to_string(), |c| format!("{c:.2}"));
            let peers = |v: String| if ours { v } else { String::new() };
            let _ = writeln!(
                out,
                "| {name} | {bold_open}{}{bold_close} | {bold_open}{:.0}{bold_close} | {cpu} | {} | {} | {} |",
                r.target,
                r.rps,
                if r.target == "direct" { String::new() } else { ratio(r.rps, haproxy) },
                if r.target == "direct" { String::new() } else { ratio(r.rps, nginx) },
                peers(r.cpu.map_or("–".to_string(), |c| ratio(c, best_cpu))),
            );
        }
    }
    out
}

/// Two panels: requests per second relative to HAProxy, and CPU per request relative to the
/// better of HAProxy and nginx, per scenario and target.
fn chart(scenarios: &[Scenario], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let targets = ["haproxy", "nginx", "tcpvs", "tcpvs-copy", "tcpvs-splice"];
    let colours = [
        RGBColor(0x90, 0x90, 0x90),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x94, 0x67, 0xbd),
    ];
    let width = (160 + 170 * scenarios.len() as u32).max(760);
    let root = SVGBackend::new(path, (width, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(310);
    for (panel, area) in [(0, &top), (1, &bottom)] {
        let values: Vec<Vec<Option<f64>>> = scenarios
            .iter()
            .map(|s| {
                targets
                    .iter()
                    .map(|t| {
                        let r = s.get(t)?;
                        if panel == 0 {
                            Some(r.rps / s.get("haproxy")?.rps)
                        } else {
                            Some(r.cpu? / s.best_peer_cpu()?)
                        }
                    })
                    .collect()
            })
            .collect();
        let top_value = values
            .iter()
            .flatten()
            .flatten()
            .fold(1.2f64, |m, v| m.max(*v))
            // Head room for the legend (upper left, where the first scenario sits near 1.0).
            * 1.6;
        let caption = if panel == 0 {
            "req/s ÷ HAProxy's (higher is better)"
        } else {
            "proxy CPU per request ÷ the better peer's (lower is better)"
        };
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(38)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..scenarios.len() as f64, 0f64..top_value)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(scenarios.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - x.floor() - 0.5).abs() < 0.01 && i < scenarios.len() {
                    short_title(&scenarios[i].title)
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| format!("{y:.1}"))
            .draw()?;
        let bar = 0.8 / targets.len() as f64;
        for (t, (target, colour)) in targets.iter().zip(colours.iter()).enumerate() {
            let bars: Vec<Rectangle<(f64, f64)>> = values
                .iter()
                .enumerate()
                .filter_map(|(i, row)| {
                    let v = row[t]?;
                    let x0 = i as f64 + 0.1 + bar * t as f64;
                    Some(Rectangle::new(
                        [(x0, 0.0), (x0 + bar * 0.9, v)],
                        colour.filled(),
                    ))
                })
                .collect();
            if bars.is_empty() {
                continue;
            }
            chart
                .draw_series(bars)?
                .label(*target)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                });
        }
        chart.draw_series(LineSeries::new(
            vec![(0.0, 1.0), (scenarios.len() as f64, 1.0)],
            BLACK.stroke_width(1),
        ))?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

fn short_title(title: &str) -> String {
    let t = title.split(':').next().unwrap_or(title).trim();
    t.chars().take(26).collect()
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let files: Vec<PathBuf> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .collect();
    if files.is_empty() {
        // Also what `cargo test --benches` runs: it must not rewrite BENCHMARKS.md.
        println!("usage: cargo bench --bench report -- RESULTS.txt...  (see benches/compare.sh)");
        return;
    }
    let mut scenarios = Vec::new();
    for file in &files {
        match std::fs::read_to_string(file) {
            Ok(text) => scenarios.extend(parse(&text)),
            Err(e) => eprintln!("report: {}: {e}", file.display()),
        }
    }
    if scenarios.is_empty() {
        eprintln!("report: no medians found in {files:?}");
        std::process::exit(1);
    }
    let svg = root.join("benches/results/comparison.svg");
    if let Err(e) = chart(&scenarios, &svg) {
        eprintln!("report: chart: {e}");
        std::process::exit(1);
    }
    let section = format!(
        "<!-- comparison:begin -->\n{}\n![requests per second and CPU per request against HAProxy and nginx](benches/results/comparison.svg)\n<!-- comparison:end -->",
        table(&scenarios)
    );
    let doc_path = root.join("BENCHMARKS.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap_or_default();
    let updated = match (
        doc.find("<!-- comparison:begin -->"),
        doc.find("<!-- comparison:end -->"),
    ) {
        (Some(b), Some(e)) if b < e => {
            format!(
                "{}{section}{}",
                &doc[..b],
                &doc[e + "<!-- comparison:end -->".len()..]
            )
        }
        _ => format!("{doc}\n{section}\n"),
    };
    if let Err(e) = std::fs::write(&doc_path, updated) {
        eprintln!("report: {}: {e}", doc_path.display());
        std::process::exit(1);
    }
    println!("{}", table(&scenarios));
    println!(
        "wrote {} and the table in {}",
        svg.display(),
        doc_path.display()
    );
}
