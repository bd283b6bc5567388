//! [`builtins`]: every built-in tool, ready to register.

use std::sync::Arc;

use crate::agents::{CancelTool, SpawnTool, WaitTool};
use crate::finish::FinishTool;
use crate::fs::{ListTool, ReadTool, WriteTool};
use crate::proc::ProcTool;
use crate::results::ResultReadTool;
use crate::tool::Tool;

/// All built-in tools.
pub fn builtins() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadTool),
        Arc::new(WriteTool),
        Arc::new(ListTool),
        Arc::new(FinishTool),
        Arc::new(ProcTool::default()),
        Arc::new(SpawnTool),
        Arc::new(WaitTool),
        Arc::new(CancelTool),
        Arc::new(ResultReadTool),
    ]
}
