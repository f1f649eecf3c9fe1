//! `metascript top`: the cluster's controllers sorted by what they cost, from the `status.usage`
//! the operator writes (summed over its replicas), like `kubectl top`.

use super::cluster;
use crate::api::{UsageFigures, UsageStatus};
use crate::kinds;
use anyhow::Context as _;
use kube::api::{Api, DynamicObject, ListParams};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub(crate) struct TopArgs {
    /// Order by this figure, largest first.
    #[arg(long, value_enum, default_value_t = SortBy::Cpu)]
    pub sort: SortBy,
    /// Show the figures since each controller's usage began instead of the last ten minutes.
    #[arg(long)]
    pub total: bool,
    /// Print the table again every `--interval` seconds, until interrupted.
    #[arg(long, short = 'w')]
    pub watch: bool,
    /// Seconds between tables with `--watch`.
    #[arg(long, default_value_t = 5)]
    pub interval: u64,
    /// Kubeconfig to use; without it, $KUBECONFIG, ~/.kube/config or the in-cluster config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long)]
    pub context: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SortBy {
    /// Hook CPU time.
    Cpu,
    /// API writes.
    Writes,
    /// Hook calls.
    Calls,
    /// Failed attempts.
    Failures,
    /// Kind and name.
    Name,
}

/// One controller as `top` shows it.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    /// `DecoratorController/web`.
    controller: String,
    targets: u64,
    /// `None`: the operator has not reported usage for it (not loaded yet, or an older one).
    usage: Option<UsageStatus>,
}

pub(super) async fn top(args: &TopArgs) -> anyhow::Result<String> {
    if args.interval == 0 {
        anyhow::bail!("--interval must be at least 1 second");
    }
    let client = cluster::client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    if !args.watch {
        return Ok(table(&rows(&client).await?, args.sort, args.total));
    }
    let mut tick = tokio::time::interval(Duration::from_secs(args.interval));
    loop {
        tick.tick().await;
        let time = jiff::Timestamp::now().strftime("%H:%M:%S");
        // A failed list (the API server restarting) is said and tried again next time.
        match rows(&client).await {
            Ok(rows) => println!("{time}\n{}", table(&rows, args.sort, args.total)),
            Err(error) => eprintln!("{time} error: {error:#}"),
        }
    }
}

/// Every controller of every kind, with its status.
async fn rows(client: &kube::Client) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for kind in kinds::ALL.iter().copied() {
        let resource = cluster::controller_resource(kind);
        let listed = Api::<DynamicObject>::all_with(client.clone(), &resource)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {}", resource.plural))?;
        for object in listed {
            let status = object.data.get("status");
            rows.push(Row {
                controller: format!(
                    "{}/{}",
                    kind.name().object_kind(),
                    object.metadata.name.unwrap_or_default()
                ),
                targets: status
                    .and_then(|status| status.get("targets"))
                    .and_then(|targets| targets.as_u64())
                    .unwrap_or(0),
                usage: status
                    .and_then(|status| status.get("usage"))
                    .and_then(|usage| serde_json::from_value(usage.clone()).ok()),
            });
        }
    }
    Ok(rows)
}

/// The table, sorted; figures over the last minutes (`CPU/MIN` and `WRITES/MIN` as the
/// controllers' printer columns show them), or since usage began.
fn table(rows: &[Row], sort: SortBy, total: bool) -> String {
    let figures = |row: &Row| {
        row.usage
            .as_ref()
            .map(|usage| if total { &usage.total } else { &usage.recent })
            .cloned()
    };
    let failures = |figures: &UsageFigures| figures.failures.values().sum::<u64>();
    let key = |row: &Row| -> f64 {
        if sort == SortBy::Name {
            return 0.0;
        }
        let Some(figures) = figures(row) else {
            return -1.0;
        };
        match sort {
            SortBy::Cpu => figures.hook_cpu_millis,
            SortBy::Writes => figures.writes as f64,
            SortBy::Calls => figures.hook_calls as f64,
            SortBy::Failures => failures(&figures) as f64,
            SortBy::Name => 0.0,
        }
    };
    let mut sorted: Vec<&Row> = rows.iter().collect();
    sorted.sort_by(|a, b| {
        key(b)
            .total_cmp(&key(a))
            .then_with(|| a.controller.cmp(&b.controller))
    });
    let span = if total { "TOTAL" } else { "10M" };
    let mut lines = vec![vec![
        "CONTROLLER".to_string(),
        "TARGETS".to_string(),
        "CPU/MIN".to_string(),
        format!("CPU({span})"),
        format!("CALLS({span})"),
        format!("OPS({span})"),
        "PEAK-MEM".to_string(),
        "WEBHOOK-MS".to_string(),
        "WRITES/MIN".to_string(),
        format!("FAILURES({span})"),
    ]];
    for row in sorted {
        let mut line = vec![row.controller.clone(), row.targets.to_string()];
        match (&row.usage, figures(row)) {
            (Some(usage), Some(figures)) => line.extend([
                usage.cpu_per_minute.clone(),
                format!("{}ms", figures.hook_cpu_millis),
                figures.hook_calls.to_string(),
                figures.operations.to_string(),
                bytes(figures.peak_memory_bytes),
                match figures.webhook_calls {
                    0 => "-".to_string(),
                    _ => figures.webhook_mean_millis.to_string(),
                },
                usage.writes_per_minute.to_string(),
                failures(&figures).to_string(),
            ]),
            _ => line.extend(std::iter::repeat_n("<none>".to_string(), 8)),
        }
        lines.push(line);
    }
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|column| {
            lines
                .iter()
                .map(|line| line[column].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("   ").trim_end());
    }
    out
}

/// `17Ki`, `3.2Mi`: as `kubectl top` prints memory.
fn bytes(n: u64) -> String {
    const KI: f64 = 1024.0;
    match n as f64 {
        0.0 => "0".to_string(),
        b if b < KI * KI => format!("{:.0}Ki", (b / KI).max(1.0)),
        b => format!("{:.1}Mi", b / (KI * KI)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn row(name: &str, cpu: f64, writes: u64, failures: u64) -> Row {
        let figures = UsageFigures {
            hook_calls: writes * 2,
            hook_cpu_millis: cpu,
            operations: 1_000,
            peak_memory_bytes: 40 * 1024,
            webhook_calls: 0,
            webhook_mean_millis: 0.0,
            writes,
            failures: BTreeMap::from([("HookFailed".to_string(), failures)]),
        };
        Row {
            controller: format!("DecoratorController/{name}"),
            targets: 3,
            usage: Some(UsageStatus {
                since: "2026-01-01T00:00:00Z".into(),
                updated: "2026-01-01T00:10:00Z".into(),
                cpu_per_minute: format!("{}ms", cpu / 10.0),
                writes_per_minute: writes as f64 / 10.0,
                recent_minutes: 10,
                recent: figures.clone(),
                total: UsageFigures {
                    hook_cpu_millis: cpu * 100.0,
                    ..figures
                },
            }),
        }
    }

    fn names(table: &str) -> Vec<&str> {
        table
            .lines()
            .skip(1)
            .map(|line| line.split_whitespace().next().unwrap())
            .collect()
    }

    #[test]
    fn the_costliest_come_first_by_the_figure_asked_for() {
        let rows = vec![
            row("cheap", 1.0, 50, 0),
            row("busy", 90.0, 5, 1),
            row("broken", 3.0, 1, 40),
            Row {
                controller: "MapController/new".into(),
                targets: 0,
                usage: None,
            },
        ];
        let by_cpu = table(&rows, SortBy::Cpu, false);
        assert_eq!(
            names(&by_cpu),
            [
                "DecoratorController/busy",
                "DecoratorController/broken",
                "DecoratorController/cheap",
                "MapController/new"
            ]
        );
        let header: Vec<&str> = by_cpu.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header[2], "CPU/MIN");
        assert_eq!(header[3], "CPU(10M)");
        let busy: Vec<&str> = by_cpu.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            busy,
            [
                "DecoratorController/busy",
                "3",
                "9ms",
                "90ms",
                "10",
                "1000",
                "40Ki",
                "-",
                "0.5",
                "1"
            ]
        );
        assert!(by_cpu.lines().last().unwrap().contains("<none>"));
        assert_eq!(
            names(&table(&rows, SortBy::Writes, false))[0],
            "DecoratorController/cheap"
        );
        assert_eq!(
            names(&table(&rows, SortBy::Failures, false))[0],
            "DecoratorController/broken"
        );
        assert_eq!(
            names(&table(&rows, SortBy::Name, false))[0],
            "DecoratorController/broken"
        );
        let totals = table(&rows, SortBy::Cpu, true);
        assert!(totals.lines().next().unwrap().contains("CPU(TOTAL)"));
        assert!(totals.lines().nth(1).unwrap().contains("9000ms"));
    }

    #[test]
    fn memory_reads_as_kubectl_top_prints_it() {
        assert_eq!(bytes(0), "0");
        assert_eq!(bytes(100), "1Ki");
        assert_eq!(bytes(16 * 1024), "16Ki");
        assert_eq!(bytes(3 * 1024 * 1024 + 200 * 1024), "3.2Mi");
    }
}
