//! Completion webhooks for `agentry serve`: when a run created with a
//! `webhook` URL stops, one POST, signed per the Standard Webhooks
//! specification (`webhook-id`, `webhook-timestamp`, `webhook-signature`:
//! `v1,` and the base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`), delivered
//! at least once with a stable `webhook-id`.
//!
//! - `sign`: [`Secret`] (`whsec_…`) and the signature.
//! - `hosts`: [`WebhookHosts`], where a client's webhook URL may point.
//! - `rows`: what the outbox keeps of a webhook ([`Webhook`], [`Status`]).
//! - `outbox`: [`Outbox`], one row per webhook in the store's SQLite file
//!   (its own table), so what was not delivered survives a restart; a run's
//!   row is reserved when it starts and made ready when it stops. With the
//!   feature `postgres`, `Outbox::in_database` keeps it in a Postgres
//!   store's database instead (`outbox_pg`), where services sharing it claim
//!   each attempt so only one makes it.
//! - `deliver`: [`Deliverer`], which POSTs what is due and retries a failure
//!   on a [`Schedule`] (by default eight attempts within an hour).

mod deliver;
mod error;
mod hosts;
mod outbox;
#[cfg(feature = "postgres")]
mod outbox_pg;
mod rows;
mod sign;

pub use deliver::{Deliverer, Schedule};
pub use error::WebhookError;
pub use hosts::{UrlRefused, WebhookHosts};
pub use outbox::Outbox;
pub use rows::{CLAIM, Pending, State, Status, Webhook};
pub use sign::Secret;
