//! Redaction of store writes, on the writer thread, before the commit.

use agentry_redact::{RedactError, Redactor};
use agentry_store::Write;

/// Redacts every write of a batch in place (each content-bearing part through
/// JSON; a part without a hit is left as it was, not rebuilt).
pub(super) fn writes(redactor: &Redactor, writes: &mut [Write]) -> Result<(), RedactError> {
    for write in writes {
        match write {
            Write::CreateRun(record) => {
                redactor.redact_value(record)?;
            }
            Write::Checkpoint { checkpoint, .. } => {
                redactor.redact_value(checkpoint)?;
            }
            Write::AppendSession { entries, .. } => {
                for entry in entries {
                    redactor.redact_value(entry)?;
                }
            }
            Write::Ledger { entry, .. } => {
                redactor.redact_value(entry)?;
            }
            Write::SetTimer { timer, .. } => {
                redactor.redact_value(timer)?;
            }
            Write::Enqueue { input, .. } => {
                redactor.redact_value(input)?;
            }
            // Ids, tokens of this process, process groups: no content.
            Write::LedgerProcess { .. }
            | Write::LedgerRemote { .. }
            | Write::ClearTimer { .. }
            | Write::Dequeue { .. }
            | Write::Claim { .. }
            | Write::Heartbeat { .. }
            | Write::Release { .. }
            | Write::Fence { .. } => {}
        }
    }
    Ok(())
}
