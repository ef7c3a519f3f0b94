//! The pipeline run's report: `report.md`, `throughput.svg` (offered against carried, per
//! tier), `results.json` (what `--render` reads again) and the topology it ran.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use anyhow::Context;

use super::results::{Run, Step};

pub fn now_utc() -> String {
    crate::today()
}

pub fn machine() -> String {
    crate::machine()
}

const TIERS: [&str; 4] = ["agents", "live", "analytics", "Parquet"];

/// Writes everything into `dir`; with `topology`, a copy of it too.
pub fn write(run: &Run, dir: &Path, topology: Option<&Path>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(run)?)?;
    std::fs::write(dir.join("report.md"), markdown(run))?;
    std::fs::write(dir.join("throughput.svg"), svg(run))?;
    if let Some(topology) = topology {
        std::fs::copy(topology, dir.join("topology.toml"))?;
    }
    println!("{}", markdown(run));
    eprintln!("wrote {}", dir.join("report.md").display());
    Ok(())
}

/// One line per step while the run goes.
pub fn step_line(step: &Step) -> String {
    format!(
        "  offered {}/s: agents {:.0}/s, live {:.0}/s, analytics {:.0}/s, Parquet {:.0}/s; backlog {:?}; drained in {}; {}",
        step.offered,
        step.rate(0),
        step.rate(1),
        step.rate(2),
        step.rate(3),
        step.backlog,
        step.drain_seconds.map_or("-".into(), |s| format!("{s:.0} s")),
        if step.kept_up() { "kept up".into() } else { step.shortfalls.join("; ") }
    )
}

/// What a process is, for the tables: brokers by cluster kind, one row per kind otherwise.
fn group(name: &str) -> String {
    let kind = match name {
        n if n.starts_with("broker-analytics") => "analytics brokers",
        n if n.starts_with("broker-") => "live brokers",
        n if n.starts_with("lb-") => "HAProxy",
        n if n.starts_with("agent-") => "agents",
        n if n.starts_with("simulator-") => "simulators (the load)",
        n => n,
    };
    kind.to_owned()
}

/// Per group: (processes, CPU-seconds, largest peak RSS of one process).
fn groups(step: &Step) -> BTreeMap<String, (usize, f64, u64)> {
    let mut groups: BTreeMap<String, (usize, f64, u64)> = BTreeMap::new();
    for (name, used) in &step.processes {
        let entry = groups.entry(group(name)).or_default();
        entry.0 += 1;
        entry.1 += used.cpu_seconds;
        entry.2 = entry.2.max(used.rss_peak_bytes);
    }
    groups
}

fn ms(v: &Option<Vec<i64>>, i: usize) -> String {
    v.as_ref().map_or("-".into(), |v| v[i].to_string())
}

fn seconds(v: &Option<Vec<i64>>, i: usize) -> String {
    v.as_ref().map_or("-".into(), |v| format!("{:.1}", v[i] as f64 / 1000.0))
}

pub fn markdown(run: &Run) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Tributary pipeline benchmark — {}\n", run.date);
    let _ = writeln!(md, "Machine: {}\n", run.machine);
    let _ = writeln!(
        md,
        "The multi-process deployment of `tributary up` (topology.toml beside this report): \
         ZooKeeper, SeaweedFS, the schema registry, two live clusters and the analytics cluster \
         of three brokers each (replication factor {rf}, acks all), an HAProxy per live \
         cluster, two frontend agents, the mirror, the loader (a round every {li:.0} s), the \
         audit service and Prometheus — every one its own process on this machine, plaintext. \
         Two `frontend-agent simulate` processes (the demo's event mix of page views, clicks \
         and searches) offer each step's rate for {st:.0} s; then the pipeline drains.\n",
        rf = run.replication_factor,
        li = run.loader_interval_seconds,
        st = run.step_seconds,
    );
    match run.sustained() {
        Some(step) => {
            let _ = writeln!(
                md,
                "**Sustained: {} events/s** offered and carried by every tier to Parquet \
                 (agents {:.0}/s, live {:.0}/s, analytics {:.0}/s, Parquet {:.0}/s).\n",
                step.offered,
                step.rate(0),
                step.rate(1),
                step.rate(2),
                step.rate(3)
            );
        }
        None => {
            let _ = writeln!(md, "**No step was kept up.**\n");
        }
    }
    let v = &run.verdicts;
    let _ = writeln!(
        md,
        "Audit over every window of the run: {} complete, {} duplication, {} loss, {} still open.\n",
        v.complete, v.duplication, v.loss, v.open
    );

    let _ = writeln!(md, "## Events per second carried, per tier\n");
    let _ = writeln!(
        md,
        "Backlog: events accepted but not yet through each tier when the step's offer ended \
         (agent → live, live → analytics, analytics → Parquet). Kept up: the agents accepted \
         ≥ 97 % of the offer, no backlog above 5 s of it (the loader's: its interval + 10 s), \
         drained in time.\n"
    );
    let _ = writeln!(
        md,
        "| offered/s | agents/s | live/s | analytics/s | Parquet/s | backlog agent | backlog mirror | backlog loader | drained in | kept up |"
    );
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for s in &run.steps {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {} |",
            s.offered,
            s.rate(0),
            s.rate(1),
            s.rate(2),
            s.rate(3),
            s.backlog[0],
            s.backlog[1],
            s.backlog[2],
            s.drain_seconds.map_or("not".into(), |d| format!("{d:.0} s")),
            if s.kept_up() { "yes".into() } else { format!("no: {}", s.shortfalls.join("; ")) }
        );
    }

    let _ = writeln!(md, "\n## Freshness\n");
    let _ = writeln!(
        md,
        "From the agent's accept (`header.time`) to visible in analytics (long-polling \
         consumers of every partition of `page-view` there) and to committed in Parquet (the \
         loader's commit record that covers the event's offset: `committed_at_ms`). Parquet \
         freshness is mostly the loader's interval.\n"
    );
    let _ = writeln!(
        md,
        "| offered/s | sampled events | visible p50 ms | p99 ms | max ms | Parquet p50 s | p99 s | max s |"
    );
    let _ = writeln!(md, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in &run.steps {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            s.offered,
            s.visible_samples,
            ms(&s.visible_ms, 0),
            ms(&s.visible_ms, 1),
            ms(&s.visible_ms, 2),
            seconds(&s.parquet_ms, 0),
            seconds(&s.parquet_ms, 1),
            seconds(&s.parquet_ms, 2)
        );
    }

    let names: Vec<String> = {
        let mut names: Vec<String> = run.steps.iter().flat_map(|s| groups(s).into_keys()).collect();
        names.sort();
        names.dedup();
        names
    };
    let _ = writeln!(md, "\n## CPU per event\n");
    let _ = writeln!(
        md,
        "CPU-seconds (user + system, `/proc/PID/stat`) per million accepted events over the \
         step and its drain — the same number as CPU-µs per event — summed over the processes \
         of each kind.\n"
    );
    let header: Vec<String> = run.steps.iter().map(|s| format!("{}/s", s.offered)).collect();
    let _ = writeln!(md, "| process | {} |", header.join(" | "));
    let _ = writeln!(md, "|---|{}", "---:|".repeat(run.steps.len()));
    let mut totals = vec![0.0; run.steps.len()];
    for name in &names {
        let cells: Vec<String> = run
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| match groups(s).get(name) {
                Some(&(_, cpu, _)) => {
                    if !name.starts_with("simulators") {
                        totals[i] += s.cpu_per_million(cpu);
                    }
                    format!("{:.1}", s.cpu_per_million(cpu))
                }
                None => "-".into(),
            })
            .collect();
        let _ = writeln!(md, "| {name} | {} |", cells.join(" | "));
    }
    let cells: Vec<String> = totals.iter().map(|t| format!("**{t:.1}**")).collect();
    let _ = writeln!(md, "| **the pipeline (all but the load)** | {} |", cells.join(" | "));

    let _ = writeln!(md, "\n## Peak resident memory\n");
    let _ = writeln!(
        md,
        "The largest `VmRSS` any one process of each kind had, sampled every second, in MiB.\n"
    );
    let _ = writeln!(md, "| process | {} |", header.join(" | "));
    let _ = writeln!(md, "|---|{}", "---:|".repeat(run.steps.len()));
    for name in &names {
        let cells: Vec<String> = run
            .steps
            .iter()
            .map(|s| match groups(s).get(name) {
                Some(&(n, _, rss)) => {
                    let each = if n > 1 { format!(" (×{n})") } else { String::new() };
                    format!("{:.0}{each}", rss as f64 / (1 << 20) as f64)
                }
                None => "-".into(),
            })
            .collect();
        let _ = writeln!(md, "| {name} | {} |", cells.join(" | "));
    }
    let _ = writeln!(
        md,
        "\nRegenerate: `target/release/tributary-bench pipeline --render results.json --out DIR`."
    );
    md
}

/// Offered (x) against carried (y) per tier, on linear axes, with the line of keeping up.
pub fn svg(run: &Run) -> String {
    const W: f64 = 720.0;
    const H: f64 = 480.0;
    let (left, right, top, bottom) = (80.0, W - 150.0, 40.0, H - 50.0);
    let max = run
        .steps
        .iter()
        .flat_map(|s| (0..4).map(|i| s.rate(i)).chain([s.offered as f64]))
        .fold(1000.0, f64::max)
        * 1.05;
    let x = |v: f64| left + (right - left) * v / max;
    let y = |v: f64| bottom - (bottom - top) * v / max;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{left}\" y=\"24\" font-size=\"15\">Events/s carried per tier against events/s offered</text>\n"
    );
    for i in 0..=5 {
        let v = max * f64::from(i) / 5.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" x2=\"{right}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{label}</text><text x=\"{xx:.1}\" y=\"{by}\" text-anchor=\"middle\">{label}</text>",
            yy = y(v),
            tx = left - 6.0,
            ty = y(v) + 4.0,
            xx = x(v),
            by = bottom + 18.0,
            label = human(v),
        );
    }
    let _ = writeln!(
        svg,
        "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999\" stroke-dasharray=\"4 4\"/><text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">offered, events/s</text>",
        x(0.0),
        y(0.0),
        x(max),
        y(max),
        (left + right) / 2.0,
        H - 12.0
    );
    let colors = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"];
    for (i, (tier, color)) in TIERS.iter().zip(colors).enumerate() {
        let points: Vec<String> = run
            .steps
            .iter()
            .map(|s| format!("{:.1},{:.1}", x(s.offered as f64), y(s.rate(i))))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>",
            points.join(" ")
        );
        for s in &run.steps {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"><title>{tier}: {:.0}/s at {}/s offered</title></circle>",
                x(s.offered as f64),
                y(s.rate(i)),
                s.rate(i),
                s.offered
            );
        }
        let ly = top + 20.0 * i as f64;
        let _ = writeln!(
            svg,
            "<rect x=\"{}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{color}\"/><text x=\"{}\" y=\"{:.1}\">{tier}</text>",
            right + 16.0,
            ly,
            right + 34.0,
            ly + 10.0
        );
    }
    if let Some(s) = run.sustained() {
        let _ = writeln!(
            svg,
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{top}\" y2=\"{bottom}\" stroke=\"#444\" stroke-dasharray=\"2 3\"/><text x=\"{tx:.1}\" y=\"{ty}\">sustained {}/s</text>",
            s.offered,
            xx = x(s.offered as f64),
            tx = x(s.offered as f64) + 4.0,
            ty = top + 90.0,
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn human(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e3 => format!("{:.0}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}
