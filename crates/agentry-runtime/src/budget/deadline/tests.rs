//! The alarm fires once, never early, and never once disarmed.

use super::*;
use std::sync::Mutex;

/// A recorder of when an alarm fired (on the runtime's clock).
fn recorder() -> (Arc<Mutex<Vec<Instant>>>, impl Fn() + Clone + Send + 'static) {
    let fired = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&fired);
    (fired, move || {
        if let Ok(mut v) = log.lock() {
            v.push(Instant::now());
        }
    })
}

/// Alarm tests count the process-wide precise slots: one at a time.
static SLOTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Generous: a loaded machine may be slow, never this slow.
const PATIENCE: Duration = Duration::from_secs(5);

/// Polls until `done` holds; false if it never did within [`PATIENCE`].
async fn eventually(done: impl Fn() -> bool) -> bool {
    let until = Instant::now() + PATIENCE;
    while !done() {
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

fn fired_at(fired: &Arc<Mutex<Vec<Instant>>>) -> Vec<Instant> {
    fired.lock().map(|v| v.clone()).unwrap_or_default()
}

/// Every precise sleep has ended (its thread fired or not, and let go of
/// its slot).
async fn precise_sleeps_ended() -> bool {
    eventually(|| PRECISE_ALARMS.load(Ordering::Acquire) == 0).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_fires_once_and_never_early() {
    let _one_at_a_time = SLOTS.lock().await;
    // A lead longer than the wait: the whole wait is the precise one.
    let at = Instant::now() + Duration::from_millis(30);
    let (fired, fire) = recorder();
    let timer = DeadlineTimer::arm_with(at, Duration::from_secs(1), fire);
    assert!(
        eventually(|| !fired_at(&fired).is_empty()).await,
        "never fired"
    );
    // Both waits are over: the backstop's task and the precise thread.
    let disarmed = Arc::clone(&timer.disarmed);
    assert!(tokio::time::timeout(PATIENCE, timer.task).await.is_ok());
    assert!(precise_sleeps_ended().await);
    let fired = fired_at(&fired);
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0] >= at);
    assert!(disarmed.load(Ordering::Acquire), "fired, so spent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disarmed_alarm_fires_nothing_even_mid_sleep() {
    let _one_at_a_time = SLOTS.lock().await;
    let at = Instant::now() + Duration::from_millis(300);
    let (fired, fire) = recorder();
    // A lead longer than the wait: the precise sleep starts at once.
    let timer = DeadlineTimer::arm_with(at, Duration::from_secs(1), fire);
    assert!(
        eventually(|| PRECISE_ALARMS.load(Ordering::Acquire) == 1).await,
        "the precise sleep never started"
    );
    timer.disarm();
    // The precise thread wakes at the deadline and ends without firing.
    assert!(precise_sleeps_ended().await);
    assert!(Instant::now() >= at);
    assert_eq!(fired_at(&fired), Vec::<Instant>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_alarms_than_precise_slots_all_fire_once_never_early() {
    let _one_at_a_time = SLOTS.lock().await;
    // Four times the slots: most of these wait on tokio's timer alone.
    let n = 4 * MAX_PRECISE_ALARMS;
    let at = Instant::now() + Duration::from_millis(50);
    let (fired, fire) = recorder();
    let timers: Vec<_> = (0..n)
        .map(|_| DeadlineTimer::arm_with(at, Duration::from_secs(1), fire.clone()))
        .collect();
    assert!(eventually(|| fired_at(&fired).len() >= n).await);
    for timer in timers {
        assert!(tokio::time::timeout(PATIENCE, timer.task).await.is_ok());
    }
    assert!(precise_sleeps_ended().await);
    let fired = fired_at(&fired);
    assert_eq!(fired.len(), n);
    assert!(fired.iter().all(|t| *t >= at));
}

#[tokio::test(start_paused = true)]
async fn on_a_paused_clock_the_alarm_fires_at_its_instant() {
    let _one_at_a_time = SLOTS.lock().await;
    // The blocking thread's real sleep does not move the paused clock: tokio's
    // timer fires instead, at the instant.
    let at = Instant::now() + Duration::from_millis(200);
    let (fired, fire) = recorder();
    let _timer = DeadlineTimer::arm_with(at, DEADLINE_LEAD, fire);
    tokio::time::sleep_until(at + Duration::from_millis(50)).await;
    let fired = fired.lock().map(|v| v.clone()).unwrap_or_default();
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(fired[0] >= at && fired[0] < at + Duration::from_millis(10));
}
