//! A receiver on 127.0.0.1 for what `agentry serve` POSTs out (completion
//! webhooks, A2A push notifications): it answers each POST by a rule and
//! records it with its headers, for the webhook, push and Postgres tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;

use super::serve::WAIT;

/// One POST a receiver got.
#[derive(Debug, Clone)]
pub(super) struct Post {
    /// Its headers, by lowercase name.
    pub(super) headers: BTreeMap<String, String>,
    pub(super) body: String,
    /// The status the receiver answered it with.
    pub(super) answered: u16,
}

impl Post {
    /// Header `name` (lowercase); empty when absent.
    pub(super) fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }

    /// The body as JSON (`Null` when it is not).
    pub(super) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// The status for a POST, given the POSTs before it.
type Rule = Box<dyn FnMut(&[Post], &Post) -> u16 + Send>;

/// A receiver on 127.0.0.1; its POSTs go to `url`.
pub(super) struct Receiver {
    pub(super) url: String,
    got: Arc<Mutex<Vec<Post>>>,
    rule: Arc<Mutex<Rule>>,
}

impl Receiver {
    /// Answers each POST with the next status of `statuses` (the last one
    /// repeats).
    pub(super) async fn start(statuses: &[u16]) -> Receiver {
        let mut script = statuses.to_vec();
        Receiver::answering(move |_, _| {
            if script.len() > 1 {
                script.remove(0)
            } else {
                script[0]
            }
        })
        .await
    }

    /// Answers each POST with what `rule` says of it and the POSTs before.
    pub(super) async fn answering(
        rule: impl FnMut(&[Post], &Post) -> u16 + Send + 'static,
    ) -> Receiver {
        let got: Arc<Mutex<Vec<Post>>> = Arc::default();
        let rule: Arc<Mutex<Rule>> = Arc::new(Mutex::new(Box::new(rule)));
        let (seen, answer) = (got.clone(), rule.clone());
        let handler = move |headers: HeaderMap, body: String| {
            let (seen, answer) = (seen.clone(), answer.clone());
            async move {
                let headers = headers
                    .iter()
                    .map(|(name, value)| {
                        let value = value.to_str().unwrap_or_default();
                        (name.as_str().to_string(), value.to_string())
                    })
                    .collect();
                let mut post = Post {
                    headers,
                    body,
                    answered: 0,
                };
                // One lock over the rule and the record: POSTs are answered
                // in the order they are recorded.
                let mut seen = seen.lock().unwrap();
                post.answered = (answer.lock().unwrap())(&seen, &post);
                let status = StatusCode::from_u16(post.answered).unwrap();
                seen.push(post);
                status
            }
        };
        let app = axum::Router::new().route("/hook", axum::routing::post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, got, rule }
    }

    /// From now on answer `status` to every POST.
    pub(super) fn answer(&self, status: u16) {
        *self.rule.lock().unwrap() = Box::new(move |_, _| status);
    }

    /// Every POST so far, in order.
    pub(super) fn posts(&self) -> Vec<Post> {
        self.got.lock().unwrap().clone()
    }

    /// Waits (bounded) until `done` holds of the POSTs so far; they. The
    /// test fails, saying `what` and the POSTs, when it never does.
    pub(super) async fn until(&self, what: &str, done: impl Fn(&[Post]) -> bool) -> Vec<Post> {
        let deadline = Instant::now() + WAIT;
        loop {
            let posts = self.posts();
            if done(&posts) {
                return posts;
            }
            assert!(Instant::now() < deadline, "{what}: {posts:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (bounded) until webhook `id` (its `webhook-id`) was answered
    /// 2xx; its POSTs.
    pub(super) async fn delivered(&self, id: &str) -> Vec<Post> {
        let of_id = |p: &Post| p.header("webhook-id") == id;
        let done = |posts: &[Post]| posts.iter().any(|p| of_id(p) && p.answered < 300);
        let posts = self.until(&format!("{id} never delivered"), done).await;
        posts.into_iter().filter(of_id).collect()
    }
}
