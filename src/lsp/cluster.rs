//! The CustomResourceDefinitions of a cluster, for completion and checks, when the server is told
//! to read one (`metascript lsp --kubeconfig`, `--context`, `--cluster`). The command line hands
//! in the reading (the kubeconfig handling lives in the `cli` layer, above this one); here it is
//! run on a thread of its own, so a slow or unreachable cluster never holds up the editor: the
//! server answers from the workspace meanwhile, and takes the cluster's types when they arrive.

use crossbeam_channel::Receiver;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a cluster's CustomResourceDefinitions could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No usable kubeconfig (or in-cluster config), or no client from it.
    #[error("{0}")]
    Config(String),
    /// With its causes in the message: the user sees only this one line, and kube's own says
    /// little (`client error (Connect)`) above the cause that matters.
    #[error("listing CustomResourceDefinitions: {}", causes(.0))]
    List(kube::Error),
    #[error("no answer within {} s", .0.as_secs_f32())]
    TimedOut(Duration),
    /// The reading's thread ended without an answer (it panicked).
    #[error("the reading stopped without an answer")]
    Stopped,
    /// No thread or runtime to read with.
    #[error("cannot start reading: {0}")]
    Start(#[from] std::io::Error),
}

/// An error and its causes, each once (kube's errors repeat their cause in their own message).
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        let said = error.to_string();
        if !text.contains(&said) {
            text = format!("{text}: {said}");
        }
        cause = error.source();
    }
    text
}

/// Reads a cluster's CustomResourceDefinitions.
pub trait ClusterCrds: Send + Sync {
    /// Which cluster, for messages: `the cluster of dev.yaml`.
    fn describe(&self) -> String;
    /// Every CustomResourceDefinition, as JSON. The server stops waiting after `within`; the
    /// reading should stop by then too (with [`ClusterError::TimedOut`]), not linger.
    fn read(&self, within: Duration) -> Result<Vec<Value>, ClusterError>;
}

/// How long a reading may take before the server gives up on it and says so. It runs beside the
/// editor's requests, so this bounds only how long the user waits to hear that the cluster does
/// not answer.
pub(super) const TIMEOUT: Duration = Duration::from_secs(20);

pub(super) type Read = Result<Vec<Value>, ClusterError>;

/// The cluster a server reads, and its reading in flight.
pub(super) struct Cluster {
    source: Arc<dyn ClusterCrds>,
    timeout: Duration,
    /// The reading in flight: where its answer arrives, and when it is given up.
    reading: Option<(Receiver<Read>, Instant)>,
}

impl Cluster {
    pub(super) fn new(source: Arc<dyn ClusterCrds>, timeout: Duration) -> Cluster {
        Cluster {
            source,
            timeout,
            reading: None,
        }
    }

    pub(super) fn describe(&self) -> String {
        self.source.describe()
    }

    /// Starts reading the cluster on a thread of its own; nothing when a reading is in flight
    /// already (its answer is as new), which the result says (`false`).
    pub(super) fn start(&mut self) -> bool {
        if self.reading.is_some() {
            return false;
        }
        let (sender, answer) = crossbeam_channel::bounded(1);
        let (source, timeout, failed) = (self.source.clone(), self.timeout, sender.clone());
        // Not joined: a reading can block past its bound (kube runs a credential plugin on the
        // calling thread), and must not keep the server from exiting.
        let spawned = std::thread::Builder::new()
            .name("cluster-crds".into())
            .spawn(move || {
                // Given up on, or the server has gone: nobody wants the answer then.
                let _ = sender.send(source.read(timeout));
            });
        if let Err(error) = spawned {
            let _ = failed.send(Err(ClusterError::Start(error)));
        }
        self.reading = Some((answer, Instant::now() + self.timeout));
        true
    }

    /// What to wait on besides the editor: the reading's answer, and its deadline (neither
    /// arrives without a reading).
    pub(super) fn waits(&self) -> (Receiver<Read>, Receiver<Instant>) {
        match &self.reading {
            Some((answer, deadline)) => (answer.clone(), crossbeam_channel::at(*deadline)),
            None => (crossbeam_channel::never(), crossbeam_channel::never()),
        }
    }

    /// Ends the reading with the answer [`Cluster::waits`] gave (`None`: its thread ended
    /// without one). Its channel goes with it, so nothing it sends later is taken.
    pub(super) fn finish(&mut self, answer: Option<Read>) -> Read {
        self.reading = None;
        answer.unwrap_or(Err(ClusterError::Stopped))
    }

    /// Ends the reading at its deadline, unanswered.
    pub(super) fn given_up(&mut self) -> Read {
        self.finish(Some(Err(ClusterError::TimedOut(self.timeout))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::mpsc;

    /// A cluster whose reading waits until the test lets it go, and says when a reading holds
    /// the gate (so a test knows which of two readings the next answer goes to).
    struct Gate(Mutex<mpsc::Receiver<Read>>, Mutex<mpsc::Sender<()>>);

    impl ClusterCrds for Gate {
        fn describe(&self) -> String {
            "the gate".into()
        }

        fn read(&self, _within: Duration) -> Result<Vec<Value>, ClusterError> {
            let gate = self.0.lock().unwrap();
            let _ = self.1.lock().unwrap().send(());
            gate.recv().unwrap()
        }
    }

    fn crd(n: u32) -> Value {
        serde_json::json!({ "n": n })
    }

    /// An error that says `text`, caused by `cause`.
    #[derive(Debug)]
    struct Caused(&'static str, Option<Box<Caused>>);

    impl std::fmt::Display for Caused {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Caused {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|cause| cause as _)
        }
    }

    #[test]
    fn a_listing_error_says_each_cause_once() {
        let refused = Caused("Connection refused (os error 111)", None);
        let connect = Caused("tcp connect error", Some(Box::new(refused)));
        let client = Caused("client error (Connect)", Some(Box::new(connect)));
        let error = ClusterError::List(kube::Error::Service(Box::new(client)));
        assert_eq!(
            error.to_string(),
            "listing CustomResourceDefinitions: ServiceError: client error (Connect): tcp \
             connect error: Connection refused (os error 111)"
        );
    }

    #[test]
    fn one_reading_at_a_time_and_none_waited_for_past_its_deadline() {
        let (release, gate) = mpsc::channel();
        let (entered, holding) = mpsc::channel();
        let gate = Gate(Mutex::new(gate), Mutex::new(entered));
        let mut cluster = Cluster::new(Arc::new(gate), TIMEOUT);
        assert!(cluster.start());
        assert!(!cluster.start(), "a reading is in flight");
        release.send(Ok(vec![crd(1)])).unwrap();
        let (answer, _) = cluster.waits();
        assert_eq!(cluster.finish(answer.recv().ok()).unwrap(), [crd(1)]);
        // Nothing in flight: nothing to wait for (`never` channels, empty and never closed).
        let (answer, deadline) = cluster.waits();
        assert!(answer.try_recv().unwrap_err().is_empty());
        assert!(deadline.try_recv().unwrap_err().is_empty());

        // A reading stuck past a short deadline is given up, and a new one can start while it
        // is still stuck; the stuck one's late answer is not the new one's.
        let mut cluster = Cluster::new(cluster.source.clone(), Duration::from_millis(1));
        holding.recv().unwrap();
        assert!(cluster.start());
        // The stuck reading holds the gate before the next starts: the next answer is its.
        holding.recv().unwrap();
        let (_, deadline) = cluster.waits();
        deadline.recv().unwrap();
        let error = cluster.given_up().unwrap_err();
        assert!(matches!(error, ClusterError::TimedOut(_)), "{error}");
        assert!(cluster.start());
        let (answer, _) = cluster.waits();
        release.send(Ok(vec![crd(2)])).unwrap();
        release.send(Ok(vec![crd(3)])).unwrap();
        assert_eq!(cluster.finish(answer.recv().ok()).unwrap(), [crd(3)]);
        assert!(matches!(cluster.finish(None), Err(ClusterError::Stopped)));
    }
}
