//! Request/reply between actors.

use ractor::{ActorRef, RpcReplyPort};

/// Sends a request built around a reply port and waits for the reply. An actor
/// that is gone or drops the port is an error naming the actor.
pub(crate) async fn ask<M: ractor::Message, T: Send + 'static>(
    actor: &ActorRef<M>,
    build: impl FnOnce(RpcReplyPort<T>) -> M,
) -> Result<T, String> {
    match actor.call(build, None).await {
        Ok(ractor::rpc::CallResult::Success(v)) => Ok(v),
        Ok(_) => Err(format!("actor {} did not answer", actor.get_id())),
        Err(e) => Err(format!("actor {} is gone: {e}", actor.get_id())),
    }
}
