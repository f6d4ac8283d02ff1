//! The hold on tokio's paused time: probes, their backoff and timeout, staleness while held
//! and the resumption, against a sink whose answers the test scripts.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::watch;

use tokio::time::Instant;

use super::*;

/// A parked write: its number and the instant it turns stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Item {
    n: u32,
    stale_at: Instant,
}

/// A sink whose probe answers are scripted; records what it was asked.
#[derive(Default)]
struct Script {
    /// The answers of successive `probe` calls; `None` never answers. Empty: answered.
    probes: Mutex<VecDeque<Option<Result<(), HoldReason>>>>,
    probed_at: Mutex<Vec<Instant>>,
    /// Every write sent again, with whether it was sent as the probe.
    resubmitted: watch::Sender<Vec<(u32, bool)>>,
    stale: Mutex<Vec<u32>>,
}

impl Script {
    fn resubmitted(&self) -> Vec<(u32, bool)> {
        self.resubmitted.borrow().clone()
    }

    /// Waits until `n` writes were sent again.
    async fn sent(&self, n: usize) {
        let mut sent = self.resubmitted.subscribe();
        tokio::time::timeout(Duration::from_secs(60), sent.wait_for(|s| s.len() >= n))
            .await
            .expect("the writes are sent again")
            .expect("the script lives");
    }
}

impl Resubmit<Item> for Script {
    fn resubmit(self: Arc<Self>, item: Item, probe: bool) -> BoxFuture<'static, bool> {
        self.resubmitted
            .send_modify(|sent| sent.push((item.n, probe)));
        Box::pin(async { true })
    }

    fn before_probe(&self, _cause: HoldReason) {}

    fn probe(self: Arc<Self>) -> BoxFuture<'static, Result<(), HoldReason>> {
        self.probed_at.lock().unwrap().push(Instant::now());
        let answer = self.probes.lock().unwrap().pop_front();
        Box::pin(async move {
            match answer {
                None => Ok(()),
                Some(Some(answer)) => answer,
                Some(None) => std::future::pending().await,
            }
        })
    }

    fn keep_if_fresh(&self, item: Item) -> Option<Item> {
        if Instant::now() >= item.stale_at {
            self.stale.lock().unwrap().push(item.n);
            None
        } else {
            Some(item)
        }
    }
}

fn start(script: Script) -> (Arc<Hold<Item>>, Arc<Script>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let hold = Arc::new(Hold::new(metrics.clone()));
    let script = Arc::new(script);
    tokio::spawn(hold.clone().supervise(script.clone()));
    (hold, script, metrics)
}

fn item(n: u32, fresh_for: Duration) -> Item {
    Item {
        n,
        stale_at: Instant::now() + fresh_for,
    }
}

const LONG: Duration = Duration::from_secs(3600);

#[tokio::test(start_paused = true)]
async fn refused_probes_back_off_and_the_first_answered_one_resumes_in_order() {
    let script = Script::default();
    script.probes.lock().unwrap().extend([
        Some(Err(HoldReason::Unavailable)),
        Some(Err(HoldReason::Unauthorized)),
        Some(Err(HoldReason::Unavailable)),
    ]);
    let (hold, script, metrics) = start(script);
    let held_at = Instant::now();
    for n in 0..3 {
        hold.park(item(n, LONG), HoldReason::Unavailable, false);
    }
    assert_eq!(hold.cause(), Some(HoldReason::Unavailable));
    assert_eq!(metrics.blocked(), Some(HoldReason::Unavailable));

    tokio::time::timeout(Duration::from_secs(60), hold.wait_open())
        .await
        .expect("the fourth probe is answered and the gate opens");

    let probed_at = script.probed_at.lock().unwrap().clone();
    assert_eq!(
        probed_at.len(),
        4,
        "three refused probes, then one answered"
    );
    // Full jitter in a window doubling from PROBE_BACKOFF.base up to its cap: the k-th
    // wait is at most base * 2^k, and the probes never come closer than the paused clock
    // allows (each probe is its own sleep).
    let mut previous = held_at;
    for (k, at) in probed_at.iter().enumerate() {
        let window = PROBE_BACKOFF.base * 2u32.pow(k as u32);
        assert!(*at - previous <= window.min(PROBE_BACKOFF.cap), "probe {k}");
        previous = *at;
    }
    assert_eq!(
        script.resubmitted(),
        vec![(0, false), (1, false), (2, false)],
        "every parked write is sent again, in order, once"
    );
    assert_eq!(metrics.holds(), 1, "one hold for one outage");
    assert_eq!(metrics.blocked(), None);
}

#[tokio::test(start_paused = true)]
async fn a_probe_never_answered_counts_as_unavailable_after_the_probe_timeout() {
    let script = Script::default();
    script.probes.lock().unwrap().push_back(None);
    let (hold, script, _metrics) = start(script);
    let held_at = Instant::now();
    hold.park(item(0, LONG), HoldReason::Unauthorized, false);

    tokio::time::timeout(PROBE_TIMEOUT * 3, hold.wait_open())
        .await
        .expect("the probe after the silent one is answered");
    let probed_at = script.probed_at.lock().unwrap().clone();
    assert_eq!(probed_at.len(), 2);
    assert!(
        probed_at[1] - held_at >= PROBE_TIMEOUT,
        "the second probe waits for the first one's timeout"
    );
    assert_eq!(script.resubmitted(), vec![(0, false)]);
}

#[tokio::test(start_paused = true)]
async fn parked_writes_turning_stale_while_held_are_finished_and_the_gate_stays_shut() {
    let script = Script::default();
    // Refused for a minute of probes, then answered.
    script
        .probes
        .lock()
        .unwrap()
        .extend((0..20).map(|_| Some(Err(HoldReason::Unavailable))));
    let (hold, script, metrics) = start(script);
    hold.park(
        item(0, Duration::from_secs(2)),
        HoldReason::Unavailable,
        false,
    );
    hold.park(item(1, LONG), HoldReason::Unavailable, false);
    hold.park(
        item(2, Duration::from_secs(2)),
        HoldReason::Unavailable,
        false,
    );

    tokio::time::timeout(Duration::from_secs(600), hold.wait_open())
        .await
        .expect("the gate opens once a probe is answered");
    assert_eq!(*script.stale.lock().unwrap(), vec![0, 2]);
    assert_eq!(
        script.resubmitted(),
        vec![(1, false)],
        "only the write still fresh is sent again"
    );
    assert_eq!(script.probed_at.lock().unwrap().len(), 21);
    assert_eq!(metrics.holds(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_only_a_write_can_disprove_sends_a_parked_write_as_the_probe() {
    let (hold, script, metrics) = start(Script::default());
    hold.park(item(0, LONG), HoldReason::PatchUnsupported, false);
    hold.park(item(1, LONG), HoldReason::PatchUnsupported, false);

    // The supervisor sends the first parked write as its probe, and no request probe.
    script.sent(1).await;
    assert_eq!(script.resubmitted(), vec![(0, true)]);
    assert!(script.probed_at.lock().unwrap().is_empty());
    assert_eq!(hold.cause(), Some(HoldReason::PatchUnsupported));

    // Its write is accepted: the gate opens and the rest is sent.
    hold.probe_result(ProbeResult::Passed);
    tokio::time::timeout(Duration::from_secs(10), hold.wait_open())
        .await
        .expect("the gate opens on the probe write's success");
    assert_eq!(script.resubmitted(), vec![(0, true), (1, false)]);
    assert_eq!(metrics.blocked(), None);
}

#[tokio::test(start_paused = true)]
async fn with_nothing_fresh_left_to_probe_with_a_write_refusal_stays_held() {
    let (hold, script, metrics) = start(Script::default());
    hold.park(item(0, Duration::ZERO), HoldReason::RequestRefused, false);
    // The only parked write is stale at the first probe: after a minute of probes nothing
    // was sent and the gate is still shut.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(*script.stale.lock().unwrap(), vec![0]);
    assert_eq!(hold.cause(), Some(HoldReason::RequestRefused));
    assert_eq!(metrics.blocked(), Some(HoldReason::RequestRefused));
    assert_eq!(metrics.holds(), 1);
    // A new write refused the same way is parked and becomes the next probe.
    hold.park(item(1, LONG), HoldReason::RequestRefused, false);
    script.sent(1).await;
    assert_eq!(script.resubmitted(), vec![(1, true)]);
    assert_eq!(metrics.holds(), 1, "still the same hold");
}
