//! The run's results: a table on stdout, `report.md`, `results.json` and `throughput.svg`
//! (throughput per system per mode, and Tributary's throughput as its log grows).

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::ceiling::Ceilings;
use crate::peer::BenchResult;
use crate::workload::{Latency, Throughput};

#[derive(Debug, Serialize, Deserialize)]
pub struct SystemResult {
    pub name: String,
    pub description: String,
    /// Why the system did not run, or failed part-way.
    pub error: Option<String>,
    pub produce_single: Option<Throughput>,
    pub produce_batch: Option<Throughput>,
    pub consume_single: Option<Throughput>,
    pub consume_batch: Option<Throughput>,
    pub disk_bytes_per_message: Option<f64>,
    pub latency: Option<Latency>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct GrowthPoint {
    pub log_bytes: u64,
    pub produce: Throughput,
    pub consume: Throughput,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub date: String,
    pub machine: String,
    pub command: String,
    pub messages: u64,
    pub message_bytes: usize,
    pub batch: usize,
    pub ceilings: Ceilings,
    pub systems: Vec<SystemResult>,
    pub log_growth: Vec<GrowthPoint>,
}

/// Tributary itself, under either visibility policy, rather than a peer.
fn is_tributary(s: &SystemResult) -> bool {
    s.name.starts_with("tributary")
}

fn rate(t: &Option<Throughput>) -> String {
    t.map_or("–".into(), |t| format!("{:.0}", t.messages_per_second()))
}

fn mb(t: &Option<Throughput>) -> String {
    t.map_or("–".into(), |t| format!("{:.1}", t.megabytes_per_second()))
}

impl Report {
    fn tributary(&self) -> Option<&SystemResult> {
        self.systems.iter().find(|s| s.name == "tributary")
    }

    /// The summary table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<10} {:>14} {:>14} {:>14} {:>14} {:>10} {:>10} {:>10}",
            "system",
            "produce 1/req",
            "produce batch",
            "consume",
            "consume MB/s",
            "bytes/msg",
            "p50 µs",
            "p99 µs"
        );
        for s in &self.systems {
            if let Some(e) = &s.error {
                let _ = writeln!(
                    out,
                    "{:<10} not run: {}",
                    s.name,
                    e.lines().next().unwrap_or_default()
                );
                continue;
            }
            let _ = writeln!(
                out,
                "{:<10} {:>14} {:>14} {:>14} {:>14} {:>10} {:>10} {:>10}",
                s.name,
                rate(&s.produce_single),
                rate(&s.produce_batch),
                rate(&s.consume_batch),
                mb(&s.consume_batch),
                s.disk_bytes_per_message.map_or("–".into(), |b| format!("{b:.0}")),
                s.latency.map_or("–".into(), |l| format!("{:.0}", l.p50_us)),
                s.latency.map_or("–".into(), |l| format!("{:.0}", l.p99_us)),
            );
        }
        out
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# Tributary benchmark — {}\n", self.date);
        let _ = writeln!(md, "Machine: {}\n", self.machine);
        let _ = writeln!(md, "Command: `{}`\n", self.command);
        let _ = writeln!(
            md,
            "One producer and one consumer against one server on 127.0.0.1; {} messages of {} bytes per mode; \
             \"1/req\" sends one message per request, \"batch\" sends {} per request in each system's own batching. \
             Consumer throughput reads back everything the batch-mode producer sent. Rates are messages per second. \
             Payloads are pseudo-random (incompressible); disk bytes per message are measured after the first N \
             messages are stored and before any is consumed. Each latency run starts after a `sync`, so that the \
             writeback of the throughput steps' data does not land in it.\n",
            self.messages, self.message_bytes, self.batch
        );
        let _ = writeln!(md, "![throughput](throughput.svg)\n");
        let _ = writeln!(md, "## Throughput\n");
        let _ = writeln!(
            md,
            "| system | produce 1/req | produce batch | consume (1/req stream) | consume (batch stream) | consume MB/s | disk bytes/msg |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
        for s in self.systems.iter().filter(|s| s.error.is_none()) {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} |",
                s.name,
                rate(&s.produce_single),
                rate(&s.produce_batch),
                rate(&s.consume_single),
                rate(&s.consume_batch),
                mb(&s.consume_batch),
                s.disk_bytes_per_message.map_or("–".into(), |b| format!("{b:.0}"))
            );
        }
        if let Some(t) = self.tributary().filter(|t| t.error.is_none()) {
            let _ = writeln!(md, "\n## Tributary relative to each peer (× faster)\n");
            let _ = writeln!(md, "| peer | produce 1/req | produce batch | consume |");
            let _ = writeln!(md, "|---|---:|---:|---:|");
            let ratio = |a: &Option<Throughput>, b: &Option<Throughput>| match (a, b) {
                (Some(a), Some(b)) => {
                    format!("{:.1}", a.messages_per_second() / b.messages_per_second())
                }
                _ => "–".into(),
            };
            for p in self.systems.iter().filter(|s| !is_tributary(s) && s.error.is_none()) {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} |",
                    p.name,
                    ratio(&t.produce_single, &p.produce_single),
                    ratio(&t.produce_batch, &p.produce_batch),
                    ratio(&t.consume_batch, &p.consume_batch)
                );
            }
        }
        let _ = writeln!(md, "\n## End-to-end latency (µs) at a fixed offered rate\n");
        let _ = writeln!(md, "| system | rate/s | messages | p50 | p99 | p99.9 | max |");
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
        for s in &self.systems {
            if let Some(l) = s.latency {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
                    s.name, l.rate_per_second, l.messages, l.p50_us, l.p99_us, l.p999_us, l.max_us
                );
            }
        }
        let best_peer = self
            .systems
            .iter()
            .filter(|s| !is_tributary(s))
            .filter_map(|s| s.latency.map(|l| (s.name.as_str(), l.p99_us)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((peer, peer_p99)) = best_peer {
            let _ = writeln!(md);
            for s in self.systems.iter().filter(|s| is_tributary(s)) {
                if let Some(l) = s.latency {
                    let verdict = if l.p99_us <= peer_p99 { "at or below" } else { "above" };
                    let _ = writeln!(
                        md,
                        "- {}: p99 {:.0} µs, {verdict} the best peer's ({peer}, {:.0} µs)",
                        s.name, l.p99_us, peer_p99
                    );
                }
            }
        }
        let _ = writeln!(md, "\n## The machine's ceilings\n");
        let _ = writeln!(md, "- single-core memcpy: {:.0} MB/s", self.ceilings.memcpy_mb_per_s);
        let _ = writeln!(
            md,
            "- one loopback TCP connection: {:.0} MB/s",
            self.ceilings.loopback_tcp_mb_per_s
        );
        if let Some(c) = self.tributary().and_then(|t| t.consume_batch) {
            let _ = writeln!(
                md,
                "- Tributary's consumer moved {:.0} MB/s of messages: {:.0}% of loopback TCP",
                c.megabytes_per_second(),
                100.0 * c.megabytes_per_second() / self.ceilings.loopback_tcp_mb_per_s
            );
        }
        if !self.log_growth.is_empty() {
            let _ = writeln!(md, "\n## Tributary as its log grows\n");
            let _ = writeln!(md, "| log size | produce batch msg/s | consume msg/s |");
            let _ = writeln!(md, "|---:|---:|---:|");
            for g in &self.log_growth {
                let _ = writeln!(
                    md,
                    "| {:.2} GiB | {:.0} | {:.0} |",
                    g.log_bytes as f64 / (1u64 << 30) as f64,
                    g.produce.messages_per_second(),
                    g.consume.messages_per_second()
                );
            }
        }
        let _ = writeln!(md, "\n## Systems and settings\n");
        for s in &self.systems {
            match &s.error {
                Some(e) => {
                    let _ = writeln!(
                        md,
                        "- **{}** — not run: {}",
                        s.name,
                        e.lines().next().unwrap_or_default()
                    );
                }
                None => {
                    let _ = writeln!(md, "- **{}** — {}", s.name, s.description);
                }
            }
        }
        md
    }

    pub fn write(&self, dir: &Path) -> BenchResult<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("report.md"), self.markdown())?;
        std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(self)?)?;
        std::fs::write(dir.join("throughput.svg"), self.svg())?;
        Ok(())
    }

    /// Bars of msg/s per system per mode on a log scale, and a line chart of Tributary's
    /// throughput against its log size.
    pub fn svg(&self) -> String {
        const W: f64 = 900.0;
        const H: f64 = 360.0;
        let ran: Vec<&SystemResult> = self.systems.iter().filter(|s| s.error.is_none()).collect();
        let modes: [Mode; 3] = [
            ("produce 1/req", "#8da0cb", |s| s.produce_single),
            ("produce batch", "#66c2a5", |s| s.produce_batch),
            ("consume", "#fc8d62", |s| s.consume_batch),
        ];
        let max = ran
            .iter()
            .flat_map(|s| modes.iter().filter_map(|(_, _, f)| f(s)))
            .map(|t| t.messages_per_second())
            .fold(10.0, f64::max);
        let top = 10f64.powf(max.log10().ceil());
        let (left, bottom, plot_h) = (70.0, H - 40.0, H - 80.0);
        let y = |v: f64| bottom - plot_h * (v.max(1.0).log10() / top.log10());
        let height = 2.0 * H + 40.0;
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{left}\" y=\"22\" font-size=\"15\">Messages per second ({} × {} B, log scale)</text>\n",
            self.messages, self.message_bytes
        );
        let mut decade = 1.0;
        while decade <= top {
            let yy = y(decade);
            let _ = writeln!(
                svg,
                "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                W - 20.0,
                left - 6.0,
                yy + 4.0,
                human(decade)
            );
            decade *= 10.0;
        }
        let group_w = (W - left - 30.0) / ran.len().max(1) as f64;
        let bar_w = group_w / (modes.len() as f64 + 1.0);
        for (i, s) in ran.iter().enumerate() {
            let x0 = left + i as f64 * group_w + bar_w / 2.0;
            for (j, (_, color, f)) in modes.iter().enumerate() {
                if let Some(t) = f(s) {
                    let v = t.messages_per_second();
                    let (x, yy) = (x0 + j as f64 * bar_w, y(v));
                    let _ = writeln!(
                        svg,
                        "<rect x=\"{x:.1}\" y=\"{yy:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"><title>{} {}: {v:.0} msg/s</title></rect>",
                        bar_w - 2.0,
                        bottom - yy,
                        s.name,
                        modes[j].0
                    );
                }
            }
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                x0 + bar_w * 1.5,
                bottom + 16.0,
                s.name
            );
        }
        for (j, (label, color, _)) in modes.iter().enumerate() {
            let x = W - 160.0;
            let yy = 40.0 + j as f64 * 16.0;
            let _ = writeln!(
                svg,
                "<rect x=\"{x}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{:.1}\">{label}</text>",
                yy - 9.0,
                x + 14.0,
                yy
            );
        }
        // Throughput against log size.
        let oy = H + 20.0;
        let _ = writeln!(
            svg,
            "<text x=\"{left}\" y=\"{:.1}\" font-size=\"15\">Tributary msg/s as the log grows</text>",
            oy + 20.0
        );
        if !self.log_growth.is_empty() {
            let max_rate = self
                .log_growth
                .iter()
                .flat_map(|g| [g.produce.messages_per_second(), g.consume.messages_per_second()])
                .fold(1.0, f64::max)
                * 1.1;
            let max_log = self.log_growth.iter().map(|g| g.log_bytes).max().unwrap_or(1) as f64;
            let (gb, gh) = (oy + H - 40.0, H - 80.0);
            let px = |b: u64| left + (W - left - 40.0) * (b as f64 / max_log);
            let py = |r: f64| gb - gh * r / max_rate;
            let _ = writeln!(
                svg,
                "<line x1=\"{left}\" x2=\"{}\" y1=\"{gb:.1}\" y2=\"{gb:.1}\" stroke=\"#999\"/>",
                W - 40.0
            );
            let _ = writeln!(
                svg,
                "<line x1=\"{left}\" x2=\"{left}\" y1=\"{:.1}\" y2=\"{gb:.1}\" stroke=\"#999\"/>",
                gb - gh
            );
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                left - 6.0,
                gb - gh + 4.0,
                human(max_rate)
            );
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">0</text>",
                left - 6.0,
                gb + 4.0
            );
            let series = [("produce batch", "#66c2a5", 0), ("consume the whole log", "#fc8d62", 1)];
            for (j, (name, color, _)) in series.iter().enumerate() {
                let (x, yy) = (W - 200.0, oy + 40.0 + j as f64 * 16.0);
                let _ = writeln!(
                    svg,
                    "<rect x=\"{x}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{yy:.1}\">{name}</text>",
                    yy - 9.0,
                    x + 14.0
                );
            }
            for (name, color, f) in series {
                let points: Vec<String> = self
                    .log_growth
                    .iter()
                    .map(|g| {
                        let r = if f == 0 {
                            g.produce.messages_per_second()
                        } else {
                            g.consume.messages_per_second()
                        };
                        format!("{:.1},{:.1}", px(g.log_bytes), py(r))
                    })
                    .collect();
                let _ = writeln!(
                    svg,
                    "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"><title>{name}</title></polyline>",
                    points.join(" ")
                );
            }
            for g in &self.log_growth {
                let _ = writeln!(
                    svg,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.2} GiB</text>",
                    px(g.log_bytes),
                    gb + 16.0,
                    g.log_bytes as f64 / (1u64 << 30) as f64
                );
            }
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// A bar series of the chart: label, colour, and the result it plots.
type Mode = (&'static str, &'static str, fn(&SystemResult) -> Option<Throughput>);

fn human(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}
