//! `metascript run` where no cluster is configured: one clear message that says what was looked
//! for and how to give or get a cluster, not kube-rs's cause three times over.

use std::path::Path;
use std::process::{Command, Output};

/// `metascript run` with no kubeconfig anywhere and no pod environment; `kubeconfig` is put in
/// KUBECONFIG when given.
fn run_without_cluster(home: &Path, kubeconfig: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metascript"));
    command
        .args(["run", "--metrics-addr", "none"])
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("METASCRIPT_WEBHOOK_ADDR");
    if let Some(path) = kubeconfig {
        command.env("KUBECONFIG", path);
    }
    command.output().expect("metascript runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn run_without_any_cluster_says_so_once_and_how_to_get_one() {
    let home = tempfile::tempdir().unwrap();
    let output = run_without_cluster(home.path(), None);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one error line:\n{text}");
    let home_config = home.path().join(".kube/config");
    for wanted in [
        "no cluster to connect to",
        "--kubeconfig",
        "KUBECONFIG",
        "KUBERNETES_SERVICE_HOST",
        &home_config.display().to_string(),
        "bash hack/run-local.sh",
    ] {
        assert!(text.contains(wanted), "{wanted:?} missing from:\n{text}");
    }
    // The cause, once: kube-rs's chain said "failed to infer config", then the kubeconfig read
    // failure with its os error, twice more.
    assert!(!text.contains("failed to infer config"), "{text}");
    assert!(!text.contains("os error"), "{text}");
    assert_eq!(
        text.matches(&*home_config.display().to_string()).count(),
        1,
        "{text}"
    );
}

#[test]
fn a_kubeconfig_that_cannot_be_read_is_named_once() {
    let home = tempfile::tempdir().unwrap();
    let missing = home.path().join("nowhere/kubeconfig");
    for output in [
        run_without_cluster(home.path(), Some(&missing)),
        Command::new(env!("CARGO_BIN_EXE_metascript"))
            .args(["run", "--metrics-addr", "none", "--kubeconfig"])
            .arg(&missing)
            .output()
            .expect("metascript runs"),
    ] {
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(1), "{text}");
        assert!(text.contains("cannot use the kubeconfig"), "{text}");
        assert_eq!(
            text.matches("No such file or directory").count(),
            1,
            "the cause once:\n{text}"
        );
        assert!(text.contains("--kubeconfig FILE"), "the way out:\n{text}");
    }
}
