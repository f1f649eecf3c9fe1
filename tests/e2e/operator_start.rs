//! Starting the operator: a start that fails half-way leaves nothing running behind it (an
//! embedding program or a test may go on after the error).

use crate::support::operator::install_crds;
use crate::support::{client, plane, unique_name};
use metascript::runtime::{Operator, OperatorConfig, StartError};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_half_way_leaves_no_task_running() {
    // Kept until the end, so its own tasks are counted in `before` and stay alive.
    let setup = client().await;
    install_crds(&setup).await.unwrap();
    let kubeconfig = plane().await.kubeconfig();
    let kube = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let tasks = tokio::runtime::Handle::current().metrics();
    let before = tasks.num_alive_tasks();
    let config = OperatorConfig {
        workers: 4,
        // Watched last, after the workers, loops and watches have started.
        scripts_dir: Some(std::env::temp_dir().join(unique_name("no-such-scripts-dir"))),
        // Serves no controller, so it touches nothing of other tests while it runs.
        controller_selector: Some("metascript.test/serves-nothing=true".into()),
        ..OperatorConfig::default()
    };
    let started = Operator::start(kube, config, &metascript::kinds::runtime()).await;
    assert!(
        matches!(started, Err(StartError::ScriptsDir { .. })),
        "a missing scripts directory fails the start: {:?}",
        started.err()
    );
    // Aborted tasks end when next polled; the watches and connections with the last client.
    let deadline = Instant::now() + Duration::from_secs(20);
    while tasks.num_alive_tasks() > before {
        assert!(
            Instant::now() < deadline,
            "{} of the failed operator's tasks still run",
            tasks.num_alive_tasks() - before
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(setup);
}
