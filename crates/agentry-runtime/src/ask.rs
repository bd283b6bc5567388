//! Request/reply between actors: the one `ask` helper.

use ractor::{ActorId, ActorRef, RpcReplyPort};

/// Why an actor gave no answer to a request (the crate's one `ask` helper).
#[derive(Debug, Clone, thiserror::Error)]
pub enum AskError {
    /// The actor dropped the reply port (it stopped while handling the request).
    #[error("actor {actor} did not answer")]
    NoAnswer {
        /// The actor asked.
        actor: ActorId,
    },
    /// The message could not be delivered: the actor is gone.
    #[error("actor {actor} is gone: {reason}")]
    Gone {
        /// The actor asked.
        actor: ActorId,
        /// ractor's reason the message was not delivered.
        reason: String,
    },
}

/// Sends a request built around a reply port and waits for the reply. An actor
/// that is gone or drops the port is an error naming the actor.
pub(crate) async fn ask<M: ractor::Message, T: Send + 'static>(
    actor: &ActorRef<M>,
    build: impl FnOnce(RpcReplyPort<T>) -> M,
) -> Result<T, AskError> {
    match actor.call(build, None).await {
        Ok(ractor::rpc::CallResult::Success(v)) => Ok(v),
        // Timeout cannot happen without a timeout; both mean no answer came.
        Ok(ractor::rpc::CallResult::SenderError | ractor::rpc::CallResult::Timeout) => {
            Err(AskError::NoAnswer {
                actor: actor.get_id(),
            })
        }
        Err(e) => Err(AskError::Gone {
            actor: actor.get_id(),
            reason: e.to_string(),
        }),
    }
}
