//! [`ModelGate`]: limits shared by every run on one named model — requests in
//! flight, requests and tokens per minute, and a provider's `Retry-After`,
//! which holds back every run on the model, not only the one that got it.
//!
//! Each attempt of a turn passes the gate before its request is sent and
//! holds its pass until the reply has been read (a streamed reply is in
//! flight until its last byte). Tokens are charged when the reply says how
//! many it used; a minute's budget overdrawn by one large turn makes the next
//! ones wait until it has refilled.
//!
//! A gate may have a shared part ([`SharedInFlight`]): a count of requests
//! in flight kept outside the process (a cluster's database), so that
//! `max_concurrent` holds across every process on it. The local slot is
//! taken first, then the shared one; the pass holds both.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::ModelError;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// What a named model allows across every run on it (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateLimits {
    /// Requests in flight at once.
    pub max_concurrent: Option<u32>,
    /// Requests started per minute.
    pub requests_per_minute: Option<u32>,
    /// Tokens (in and out) per minute.
    pub tokens_per_minute: Option<u64>,
}

/// One named model's shared limits. Cheap to share: hand the same `Arc` to
/// every run's [`ModelConfig::gate`](crate::ModelConfig::gate).
#[derive(Debug)]
pub struct ModelGate {
    limits: GateLimits,
    in_flight: Option<Arc<Semaphore>>,
    state: Mutex<GateState>,
    shared: Option<Shared>,
}

/// The gate's shared part and the model name it counts under.
#[derive(Debug)]
struct Shared {
    model: String,
    slots: Arc<dyn SharedInFlight>,
}

/// Requests in flight to a named model counted across processes (see the
/// module docs). `acquire` waits until fewer than `max` passes of `model`
/// are held anywhere and returns one; it is given back when dropped.
pub trait SharedInFlight: Send + Sync + std::fmt::Debug {
    /// A pass among `max` for `model`, once one is free; an error when the
    /// count cannot be read (the gate asks again a little later).
    fn acquire(&self, model: &str, max: u32) -> BoxFuture<'static, Result<SharedPass, ModelError>>;
}

/// One request's slot among a model's shared `max_concurrent`: given back
/// (its `release` called) when dropped.
pub struct SharedPass {
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl SharedPass {
    /// A pass that calls `release` once, when dropped.
    pub fn new(release: impl FnOnce() + Send + Sync + 'static) -> SharedPass {
        SharedPass {
            release: Some(Box::new(release)),
        }
    }
}

impl Drop for SharedPass {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl std::fmt::Debug for SharedPass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPass").finish_non_exhaustive()
    }
}

/// How long an attempt waits before asking the shared part again after it
/// failed (the database away): the request does not start meanwhile.
const SHARED_RETRY: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct GateState {
    /// A provider's `Retry-After`: no request starts before it.
    hold_until: Option<Instant>,
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
    /// Attempts waiting at the gate now.
    waiting: usize,
}

/// A token bucket: `capacity` a minute, refilled continuously; its level may
/// go below zero (tokens are charged after the fact) and then nothing passes
/// until it is back above zero.
#[derive(Debug)]
struct Bucket {
    capacity: f64,
    level: f64,
    updated: Instant,
}

impl Bucket {
    fn new(per_minute: f64, now: Instant) -> Bucket {
        Bucket {
            capacity: per_minute,
            level: per_minute,
            updated: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed * self.capacity / 60.0).min(self.capacity);
        self.updated = now;
    }

    /// How long until `amount` can be taken (zero: now).
    fn wait_for(&mut self, amount: f64, now: Instant) -> Duration {
        self.refill(now);
        let short = amount.min(self.capacity) - self.level;
        if short <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(short * 60.0 / self.capacity)
    }
}

/// What the gate reports, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateUsage {
    /// Requests in flight now.
    pub in_flight: usize,
    /// Attempts waiting at the gate (throttled) now.
    pub waiting: usize,
}

/// An attempt's pass: held until its reply has been read.
#[derive(Debug)]
pub(crate) struct GatePass {
    // Dropped first: the shared slot is given back before the local one.
    _shared: Option<SharedPass>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl ModelGate {
    /// A gate with these limits.
    pub fn new(limits: GateLimits) -> Arc<ModelGate> {
        Arc::new(ModelGate::unshared(limits))
    }

    /// A gate with these limits whose `max_concurrent` also holds across
    /// every process sharing `slots`, counted under `model`. Without
    /// `max_concurrent`, `slots` is never asked.
    pub fn with_shared(
        limits: GateLimits,
        model: impl Into<String>,
        slots: Arc<dyn SharedInFlight>,
    ) -> Arc<ModelGate> {
        let mut gate = ModelGate::unshared(limits);
        gate.shared = Some(Shared {
            model: model.into(),
            slots,
        });
        Arc::new(gate)
    }

    fn unshared(limits: GateLimits) -> ModelGate {
        let now = Instant::now();
        let bucket = |per_minute: Option<f64>| per_minute.map(|p| Bucket::new(p.max(1.0), now));
        ModelGate {
            limits,
            in_flight: limits
                .max_concurrent
                .map(|n| Arc::new(Semaphore::new(n.max(1) as usize))),
            state: Mutex::new(GateState {
                hold_until: None,
                requests: bucket(limits.requests_per_minute.map(f64::from)),
                tokens: bucket(limits.tokens_per_minute.map(|t| t as f64)),
                waiting: 0,
            }),
            shared: None,
        }
    }

    /// The limits it enforces.
    pub fn limits(&self) -> GateLimits {
        self.limits
    }

    /// Requests in flight and attempts waiting, now.
    pub fn usage(&self) -> GateUsage {
        let in_flight = match (&self.in_flight, self.limits.max_concurrent) {
            (Some(semaphore), Some(max)) => {
                (max.max(1) as usize).saturating_sub(semaphore.available_permits())
            }
            (Some(_), None) | (None, _) => 0,
        };
        GateUsage {
            in_flight,
            waiting: self.lock().waiting,
        }
    }

    /// Waits until a request may start: past any provider hold, within the
    /// per-minute budgets, and with a slot among `max_concurrent`.
    pub(crate) async fn enter(&self) -> GatePass {
        self.lock().waiting += 1;
        let _waiting = Waiting(self);
        loop {
            let delay = self.start_delay(Instant::now());
            if delay.is_zero() {
                break;
            }
            tokio::time::sleep(delay).await;
        }
        let permit = match &self.in_flight {
            // Never closed: the gate owns it.
            Some(semaphore) => Arc::clone(semaphore).acquire_owned().await.ok(),
            None => None,
        };
        let shared = self.enter_shared().await;
        GatePass {
            _shared: shared,
            _permit: permit,
        }
    }

    /// The shared slot, when the gate has a shared part and a
    /// `max_concurrent`; asked again until it answers.
    async fn enter_shared(&self) -> Option<SharedPass> {
        let (shared, max) = match (&self.shared, self.limits.max_concurrent) {
            (Some(shared), Some(max)) => (shared, max.max(1)),
            (Some(_), None) | (None, _) => return None,
        };
        loop {
            match shared.slots.acquire(&shared.model, max).await {
                Ok(pass) => return Some(pass),
                Err(error) => {
                    tracing::warn!(model = %shared.model, %error, "the shared max_concurrent cannot be read; asking again");
                    tokio::time::sleep(SHARED_RETRY).await;
                }
            }
        }
    }

    /// Zero when a request may start now (its request is then counted),
    /// else how long to wait before asking again.
    fn start_delay(&self, now: Instant) -> Duration {
        let mut state = self.lock();
        if let Some(until) = state.hold_until {
            if until > now {
                return until - now;
            }
            state.hold_until = None;
        }
        let tokens = state
            .tokens
            .as_mut()
            .map_or(Duration::ZERO, |b| b.wait_for(1.0, now));
        let requests = state
            .requests
            .as_mut()
            .map_or(Duration::ZERO, |b| b.wait_for(1.0, now));
        let delay = tokens.max(requests);
        if delay.is_zero()
            && let Some(bucket) = state.requests.as_mut()
        {
            bucket.level -= 1.0;
        }
        delay
    }

    /// The provider asked to wait (`Retry-After`): no run on this model
    /// starts a request before then.
    pub(crate) fn hold_back(&self, retry_after: Duration) {
        let until = Instant::now() + retry_after;
        let mut state = self.lock();
        if state.hold_until.is_none_or(|held| held < until) {
            state.hold_until = Some(until);
        }
    }

    /// A reply used `tokens` (in and out).
    pub(crate) fn charge(&self, tokens: u64) {
        let now = Instant::now();
        if let Some(bucket) = self.lock().tokens.as_mut() {
            bucket.refill(now);
            bucket.level -= tokens as f64;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Counts an attempt as waiting until it passes (or is dropped).
struct Waiting<'a>(&'a ModelGate);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.waiting = state.waiting.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn requests_per_minute_space_the_starts_out() {
        let gate = ModelGate::new(GateLimits {
            requests_per_minute: Some(2),
            ..GateLimits::default()
        });
        let start = Instant::now();
        for _ in 0..3 {
            drop(gate.enter().await);
        }
        // Two at once (the bucket starts full), the third a refill later.
        assert!(start.elapsed() >= Duration::from_secs(30));
        assert!(start.elapsed() < Duration::from_secs(31));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_delays_every_later_start_and_tokens_overdrawn_wait_to_refill() {
        let gate = ModelGate::new(GateLimits {
            tokens_per_minute: Some(600),
            ..GateLimits::default()
        });
        let start = Instant::now();
        gate.hold_back(Duration::from_secs(5));
        drop(gate.enter().await);
        assert!(start.elapsed() >= Duration::from_secs(5));
        gate.charge(900);
        let before = Instant::now();
        drop(gate.enter().await);
        // 600 a minute = 10 a second: from -300 to 1 takes 30.1 s.
        assert!(before.elapsed() >= Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn max_concurrent_bounds_the_passes_held() {
        let gate = ModelGate::new(GateLimits {
            max_concurrent: Some(2),
            ..GateLimits::default()
        });
        let first = gate.enter().await;
        let _second = gate.enter().await;
        assert_eq!(gate.usage().in_flight, 2);
        let third = tokio::time::timeout(Duration::from_secs(1), gate.enter()).await;
        assert!(third.is_err(), "a third pass while two are held");
        drop(first);
        let _third = gate.enter().await;
        assert_eq!(gate.usage().in_flight, 2);
        assert_eq!(gate.usage().waiting, 0);
    }

    /// A shared part kept in this process (one semaphore per model), as a
    /// cluster's database would keep it for several.
    #[derive(Debug, Default)]
    struct Counted {
        slots: Mutex<std::collections::BTreeMap<String, Arc<Semaphore>>>,
        fail_once: std::sync::atomic::AtomicBool,
    }

    impl SharedInFlight for Counted {
        fn acquire(
            &self,
            model: &str,
            max: u32,
        ) -> BoxFuture<'static, Result<SharedPass, ModelError>> {
            if self
                .fail_once
                .swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                let model = model.to_string();
                return Box::pin(async move {
                    Err(ModelError::SharedGate {
                        model,
                        reason: "away".into(),
                    })
                });
            }
            let semaphore = Arc::clone(
                self.slots
                    .lock()
                    .unwrap()
                    .entry(model.to_string())
                    .or_insert_with(|| Arc::new(Semaphore::new(max as usize))),
            );
            Box::pin(async move {
                let permit = semaphore.acquire_owned().await.unwrap();
                Ok(SharedPass::new(move || drop(permit)))
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn two_gates_sharing_a_part_hold_max_concurrent_together() {
        let shared = Arc::new(Counted::default());
        let limits = GateLimits {
            max_concurrent: Some(1),
            ..GateLimits::default()
        };
        let one = ModelGate::with_shared(limits, "m", shared.clone());
        let two = ModelGate::with_shared(limits, "m", shared.clone());
        let first = one.enter().await;
        let second = tokio::time::timeout(Duration::from_secs(1), two.enter()).await;
        assert!(
            second.is_err(),
            "a second pass on another gate while one is held"
        );
        drop(first);
        let _second = two.enter().await;
        assert_eq!(two.usage().in_flight, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shared_part_that_fails_is_asked_again() {
        let shared = Arc::new(Counted::default());
        shared
            .fail_once
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let gate = ModelGate::with_shared(
            GateLimits {
                max_concurrent: Some(1),
                ..GateLimits::default()
            },
            "m",
            shared,
        );
        let start = Instant::now();
        drop(gate.enter().await);
        assert!(start.elapsed() >= SHARED_RETRY);
    }
}
