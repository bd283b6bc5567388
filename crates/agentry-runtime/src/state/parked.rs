//! Calls parked until a human answers: approvals (with the executor's port
//! for the decision) and settlements of calls a crash interrupted.

use agentry_protocol::state::{PendingApproval, RunStatus, Settlement};
use agentry_store::StoreError;
use ractor::RpcReplyPort;

use super::msg::{ApprovalDecision, HumanInputError, Settled, SettlementPort, Waiting};
use super::run_state::{Parked, RunState};

impl RunState {
    /// Parks a call until a human decides.
    pub(super) fn park(&mut self, pending: PendingApproval, port: RpcReplyPort<ApprovalDecision>) {
        self.pending.push(Parked { pending, port });
        self.status = RunStatus::AwaitingApproval;
        self.version += 1;
    }

    /// Takes a parked call out, with the port its decision goes to.
    pub(super) fn unpark(&mut self, tool_call_id: &str) -> Option<RpcReplyPort<ApprovalDecision>> {
        let i = self
            .pending
            .iter()
            .position(|p| p.pending.call.id == tool_call_id)?;
        let Parked { port, .. } = self.pending.remove(i);
        if self.pending.is_empty() && self.status == RunStatus::AwaitingApproval {
            self.status = RunStatus::Running;
        }
        self.version += 1;
        Some(port)
    }

    /// A human's decision on a parked call: on disk before it counts, then
    /// handed to the executor. Answers with the input's sequence number.
    pub(super) async fn resolve(
        &mut self,
        tool_call_id: &str,
        decision: ApprovalDecision,
    ) -> Result<u64, HumanInputError> {
        let Some(port) = self.unpark(tool_call_id) else {
            return Err(HumanInputError::NotWaiting {
                tool_call_id: tool_call_id.to_string(),
                waiting_for: Waiting::Approval,
            });
        };
        self.inputs += 1;
        let applied = self.applied_at();
        let decision = ApprovalDecision {
            applied,
            ..decision
        };
        // An approval is an input from outside: on disk before it counts.
        match self.persist(true).await {
            Ok(()) => {
                // The executor may have given up (deadline) just now.
                let _ = port.send(decision);
                Ok(applied.input_seq)
            }
            Err(error) => Err(HumanInputError::Store {
                waiting_for: Waiting::Approval,
                error,
            }),
        }
    }

    /// Parks a call a crash interrupted until a human settles it; answers once
    /// the park is on disk.
    pub(super) async fn await_decision(
        &mut self,
        pending: PendingApproval,
        port: SettlementPort,
    ) -> Result<(), StoreError> {
        self.unsettled.push(Parked { pending, port });
        self.status = RunStatus::AwaitingDecision;
        self.version += 1;
        self.persist(true).await
    }

    /// A human's settlement of a parked call: on disk before it counts, then
    /// handed to the executor. Answers with the input's sequence number.
    pub(super) async fn settle_call(
        &mut self,
        tool_call_id: &str,
        settlement: Settlement,
    ) -> Result<u64, HumanInputError> {
        let Some(port) = self.settle(tool_call_id) else {
            return Err(HumanInputError::NotWaiting {
                tool_call_id: tool_call_id.to_string(),
                waiting_for: Waiting::Decision,
            });
        };
        let at = self.applied_at();
        match self.persist(true).await {
            Ok(()) => {
                let _ = port.send(Settled { settlement, at });
                Ok(at.input_seq)
            }
            Err(error) => Err(HumanInputError::Store {
                waiting_for: Waiting::Decision,
                error,
            }),
        }
    }

    /// Takes a call a crash interrupted out, with the port its settlement goes
    /// to; counts the settlement as an input.
    fn settle(&mut self, tool_call_id: &str) -> Option<SettlementPort> {
        let i = self
            .unsettled
            .iter()
            .position(|p| p.pending.call.id == tool_call_id)?;
        let Parked { port, .. } = self.unsettled.remove(i);
        if self.unsettled.is_empty() && self.status == RunStatus::AwaitingDecision {
            self.status = if self.pending.is_empty() {
                RunStatus::Running
            } else {
                RunStatus::AwaitingApproval
            };
        }
        self.version += 1;
        self.inputs += 1;
        Some(port)
    }
}
