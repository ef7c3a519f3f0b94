//! Small pieces the dashboard pages are built from: escaping, number and time formatting, the
//! page frame and its stylesheet. Colours are the Okabe–Ito palette, chosen to stay apart for
//! the common forms of colour blindness; every verdict also carries a symbol or a number, so
//! colour is never the only signal.

use std::fmt::Write;

use crate::ledger::Verdict;

/// Text safe inside HTML elements and quoted attributes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `12345` → `12,345`.
pub(crate) fn number(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('−');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A UTC time as `YYYY-MM-DD HH:MM` (with `:SS` when `seconds`).
pub(crate) fn utc(ms: i64, seconds: bool) -> String {
    let (date, time) = utc_parts(ms, seconds);
    format!("{date} {time}")
}

/// (`YYYY-MM-DD`, `HH:MM[:SS]`) of a UTC time.
pub(crate) fn utc_parts(ms: i64, seconds: bool) -> (String, String) {
    let t = service::clock::Utc::of_ms(ms);
    let (h, m, s) = (t.hour, t.minute, t.second);
    let time = if seconds { format!("{h:02}:{m:02}:{s:02}") } else { format!("{h:02}:{m:02}") };
    (format!("{:04}-{:02}-{:02}", t.year, t.month, t.day), time)
}

/// `600000` → `10 min`.
pub(crate) fn duration(ms: i64) -> String {
    match ms {
        ms if ms % 3_600_000 == 0 => format!("{} h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{} min", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{} s", ms / 1_000),
        ms => format!("{ms} ms"),
    }
}

/// The symbol a verdict shows beside its colour.
pub(crate) fn symbol(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Complete => "✓",
        Verdict::Loss => "▼",
        Verdict::Duplication => "▲",
        Verdict::Open => "…",
    }
}

/// A verdict as a coloured pill with its symbol and name.
pub(crate) fn chip(verdict: Verdict) -> String {
    format!(
        r#"<span class="chip {v}" data-verdict="{v}">{s} {v}</span>"#,
        v = verdict.as_str(),
        s = symbol(verdict)
    )
}

/// The legend of verdict colours.
pub(crate) fn legend() -> String {
    let mut out = String::from(r#"<div class="legend" aria-label="legend">"#);
    let items = [
        (Verdict::Complete, "complete: every tier counted what the agents sent"),
        (Verdict::Loss, "loss: a tier counted fewer (−missing)"),
        (Verdict::Duplication, "duplication: a tier counted more (+extra)"),
        (Verdict::Open, "open: window or grace not over yet"),
    ];
    for (verdict, text) in items {
        let _ = write!(
            out,
            r#"<span class="item"><span class="swatch {}">{}</span>{}</span>"#,
            verdict.as_str(),
            symbol(verdict),
            escape(text)
        );
    }
    out.push_str("</div>");
    out
}

/// The status line in the page header.
pub(crate) struct Status {
    pub caught_up: bool,
    pub window_ms: i64,
    pub grace_ms: i64,
    pub now_ms: i64,
}

/// A whole page: header, `body`, reloading itself every `refresh_s`.
pub(crate) fn page(title: &str, refresh_s: u64, status: &Status, body: &str) -> String {
    let state = if status.caught_up {
        r#"<span class="state ok">● live</span>"#
    } else {
        r#"<span class="state replaying">● replaying sources — verdicts pending</span>"#
    };
    format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{refresh_s}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Tributary audit</title>
<style>{STYLE}</style></head>
<body><header><h1><a href="/">Tributary audit</a></h1>
<span class="meta">windows of {window} · grace {grace} · updated {now} UTC · refreshes every {refresh_s} s</span>{state}</header>
<main>{body}</main></body></html>
"#,
        title = escape(title),
        window = duration(status.window_ms),
        grace = duration(status.grace_ms),
        now = utc(status.now_ms, true),
    )
}

const STYLE: &str = r#"
:root{--complete:#009E73;--loss:#D55E00;--duplication:#0072B2;--open:#DDE1E6;--ink:#1F2933;--muted:#5F6B7A;--line:#E3E7EC;--bg:#F5F6F8}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--ink);background:var(--bg)}
header{background:#1F2933;color:#fff;padding:14px 28px;display:flex;align-items:baseline;gap:22px;flex-wrap:wrap}
header h1{font-size:20px;margin:0;font-weight:650;letter-spacing:.2px}
header a{color:#fff;text-decoration:none}
header .meta{color:#C5CCD6;font-size:13px}
.state{font-size:13px;font-weight:600;margin-left:auto}
.state.ok{color:#7FD8BE}.state.replaying{color:#F0C987}
main{padding:22px 28px 40px;max-width:1500px}
h2{font-size:17px;margin:26px 0 10px}
.crumbs{font-size:14px;color:var(--muted);margin-bottom:6px}
.crumbs a{color:var(--duplication)}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:6px 0 14px}
.card{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px 18px;min-width:140px;border-top:5px solid var(--open)}
.card .n{font-size:28px;font-weight:700;font-variant-numeric:tabular-nums}
.card .l{font-size:13px;color:var(--muted)}
.card.complete{border-top-color:var(--complete)}.card.loss{border-top-color:var(--loss)}
.card.duplication{border-top-color:var(--duplication)}
.legend{display:flex;gap:20px;flex-wrap:wrap;font-size:13px;color:var(--muted);margin:6px 0 16px}
.legend .item{display:inline-flex;align-items:center;gap:7px}
.swatch{display:inline-block;width:24px;height:18px;border-radius:4px;color:#fff;font-size:11px;font-weight:700;text-align:center;line-height:18px}
.panel{background:#fff;border:1px solid var(--line);border-radius:10px;padding:14px 16px;overflow-x:auto}
table{border-collapse:collapse}
table.grid{border-collapse:separate;border-spacing:4px 3px}
.grid th{font-weight:600;font-size:12px;color:var(--muted);text-align:center;padding:2px 4px;white-space:nowrap}
.grid th small{display:block;font-weight:400;font-size:11px}
.grid td.topic{font-weight:650;padding:6px 14px 0 4px;vertical-align:top;white-space:nowrap}
.grid td.topic a{color:var(--ink);text-decoration:none;border-bottom:1px dotted var(--muted)}
.grid td.topic .sub{display:block;font-weight:400;font-size:12px;color:var(--muted)}
.grid td.tier{color:var(--muted);font-size:13px;padding-right:8px;white-space:nowrap}
.grid tr.first td{border-top:1px solid var(--line);padding-top:6px}
.cell{display:block;min-width:66px;height:28px;line-height:28px;border-radius:5px;text-align:center;font-weight:650;font-size:13px;text-decoration:none;color:#fff;font-variant-numeric:tabular-nums}
.cell:hover{outline:2px solid var(--ink)}
.ref{color:var(--ink);font-size:13px;text-align:center;font-variant-numeric:tabular-nums}
.cell.complete,.chip.complete,.swatch.complete{background:var(--complete)}
.cell.loss,.chip.loss,.swatch.loss{background:var(--loss)}
.cell.duplication,.chip.duplication,.swatch.duplication{background:var(--duplication)}
.cell.open,.chip.open,.swatch.open{background:var(--open);color:#3E4652}
.none{color:#B0B7C0;text-align:center}
.cell.loss{box-shadow:inset 0 0 0 2px #8A3A00}
.chip{display:inline-block;padding:1px 10px;border-radius:999px;font-size:13px;font-weight:650;color:#fff;white-space:nowrap}
.chip.open{color:#3E4652}
table.list{background:#fff;border:1px solid var(--line);border-radius:8px;width:100%}
.list th{font-size:12px;text-transform:uppercase;letter-spacing:.4px;color:var(--muted);text-align:right;padding:8px 12px;border-bottom:1px solid var(--line);background:#FAFBFC}
.list td{padding:7px 12px;text-align:right;border-bottom:1px solid #F0F2F5;font-variant-numeric:tabular-nums}
.list th:first-child,.list td:first-child{text-align:left}
.list tr.flag td{background:#FDF1E9}
.list td.host,.list th.host{text-align:left}
.list td.short{color:var(--loss);font-weight:700}
.list a{color:var(--duplication)}
.chart-legend{display:flex;gap:22px;font-size:13px;margin:2px 0 6px;color:var(--muted)}
.chart-legend svg{vertical-align:middle;margin-right:6px}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
.note{color:var(--muted);font-size:14px}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_escaped() {
        assert_eq!(escape(r#"<b a="1">&'"#), "&lt;b a=&quot;1&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(number(0), "0");
        assert_eq!(number(999), "999");
        assert_eq!(number(1_234_567), "1,234,567");
        assert_eq!(number(-12_345), "−12,345");
    }

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(utc(0, false), "1970-01-01 00:00");
        assert_eq!(utc(951_782_400_000, false), "2000-02-29 00:00");
        assert_eq!(utc(1_764_556_205_000, true), "2025-12-01 02:30:05");
        assert_eq!(utc(-1_000, true), "1969-12-31 23:59:59");
    }

    #[test]
    fn durations_use_the_largest_whole_unit() {
        assert_eq!(duration(600_000), "10 min");
        assert_eq!(duration(3_600_000), "1 h");
        assert_eq!(duration(2_000), "2 s");
        assert_eq!(duration(1_500), "1500 ms");
    }
}
