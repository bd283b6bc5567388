//! AG-UI threads and the runs they map to, per tenant, the newest kept (a
//! leaf: the table of runs holds one).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use crate::tenants::Tenant;

/// Threads the service remembers.
const THREADS_KEPT: usize = 10_000;

/// AG-UI threads → runs, per tenant, newest kept.
#[derive(Debug, Default)]
pub(crate) struct Threads {
    map: Mutex<ThreadMap>,
}

type ThreadKey = (Option<String>, String);

#[derive(Debug, Default)]
struct ThreadMap {
    runs: HashMap<ThreadKey, String>,
    order: VecDeque<ThreadKey>,
}

impl Threads {
    fn key(tenant: &Tenant, thread_id: &str) -> ThreadKey {
        (tenant.name().map(str::to_string), thread_id.to_string())
    }

    pub(crate) fn find(&self, tenant: &Tenant, thread_id: &str) -> Option<String> {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.runs.get(&Threads::key(tenant, thread_id)).cloned()
    }

    pub(crate) fn remember(&self, tenant: &Tenant, thread_id: &str, run_id: &str) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let key = Threads::key(tenant, thread_id);
        if map.runs.insert(key.clone(), run_id.to_string()).is_none() {
            map.order.push_back(key);
        }
        while map.order.len() > THREADS_KEPT {
            if let Some(old) = map.order.pop_front() {
                map.runs.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_its_tenants_alone() {
        let threads = Threads::default();
        threads.remember(&Tenant::named("a"), "t1", "run-1");
        assert_eq!(
            threads.find(&Tenant::named("a"), "t1").as_deref(),
            Some("run-1")
        );
        assert_eq!(threads.find(&Tenant::named("b"), "t1"), None);
        assert_eq!(threads.find(&Tenant::anyone(), "t1"), None);
    }
}
