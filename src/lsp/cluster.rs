//! The CustomResourceDefinitions of a cluster, for completion and checks, when the server is told
//! to read one (`metascript lsp --kubeconfig`, `--context`, `--cluster`). The command line hands
//! in the reading (the kubeconfig handling lives in the `cli` layer, above this one); here it is
//! run on a thread of its own, so a slow or unreachable cluster never holds up the editor: the
//! server answers from the workspace meanwhile, and takes the cluster's types when they arrive.

use crossbeam_channel::{Receiver, Sender};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

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
    #[error("no answer within {} s", .0.as_secs())]
    TimedOut(Duration),
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
    /// Which cluster, for messages: `the cluster of --kubeconfig dev.yaml`.
    fn describe(&self) -> String;
    /// Every CustomResourceDefinition, as JSON; bounded in time (a reading that fails to
    /// connect must end, with [`ClusterError::TimedOut`] if nothing else).
    fn read(&self) -> Result<Vec<Value>, ClusterError>;
}

pub(super) type Read = Result<Vec<Value>, ClusterError>;

/// The cluster a server reads, and its reading in flight.
pub(super) struct Cluster {
    source: Arc<dyn ClusterCrds>,
    sender: Sender<Read>,
    /// Where a reading's result arrives.
    pub(super) read: Receiver<Read>,
    reading: bool,
}

impl Cluster {
    pub(super) fn new(source: Arc<dyn ClusterCrds>) -> Cluster {
        let (sender, read) = crossbeam_channel::unbounded();
        Cluster {
            source,
            sender,
            read,
            reading: false,
        }
    }

    pub(super) fn describe(&self) -> String {
        self.source.describe()
    }

    /// Starts reading the cluster on a thread of its own, whose answer arrives on
    /// [`Cluster::read`]; nothing when a reading is in flight already (its answer is as new),
    /// which the result says (`false`).
    pub(super) fn start(&mut self) -> bool {
        if self.reading {
            return false;
        }
        let (source, sender) = (self.source.clone(), self.sender.clone());
        // The thread is not joined: a reading stuck past its bound (a credential plugin that
        // never returns) must not keep the editor's server from exiting.
        let spawned = std::thread::Builder::new()
            .name("cluster-crds".into())
            .spawn(move || {
                // The server may have gone; then nobody wants the answer.
                let _ = sender.send(source.read());
            });
        match spawned {
            Ok(_) => self.reading = true,
            Err(error) => {
                let _ = self.sender.send(Err(ClusterError::Start(error)));
            }
        }
        true
    }

    /// Records that a reading's answer was taken from [`Cluster::read`].
    pub(super) fn finished(&mut self) {
        self.reading = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::mpsc;

    /// A cluster whose reading waits until the test lets it go.
    struct Gate(Mutex<mpsc::Receiver<Read>>);

    impl ClusterCrds for Gate {
        fn describe(&self) -> String {
            "the gate".into()
        }

        fn read(&self) -> Result<Vec<Value>, ClusterError> {
            self.0.lock().unwrap().recv().unwrap()
        }
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
    fn one_reading_at_a_time_answers_on_the_channel() {
        let (release, gate) = mpsc::channel();
        let mut cluster = Cluster::new(Arc::new(Gate(Mutex::new(gate))));
        assert!(cluster.start());
        assert!(!cluster.start(), "a reading is in flight");
        release.send(Ok(vec![serde_json::json!({"n": 1})])).unwrap();
        let read = cluster.read.recv().unwrap().unwrap();
        assert_eq!(read, [serde_json::json!({"n": 1})]);
        cluster.finished();
        assert!(cluster.start(), "a new reading after the answer");
        release
            .send(Err(ClusterError::TimedOut(Duration::from_secs(3))))
            .unwrap();
        let error = cluster.read.recv().unwrap().unwrap_err();
        assert_eq!(error.to_string(), "no answer within 3 s");
    }
}
