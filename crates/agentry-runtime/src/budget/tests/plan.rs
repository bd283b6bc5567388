//! Random plans for the tree property: a tree shape (depth ≤ 4, fan-out ≤ 5),
//! each node's budget request and program, which children a node carves in one
//! of its own steps (`agent.spawn`) and which the embedder carves from outside
//! at any moment (`Runtime::start_child`), and a sequential phase run after the
//! concurrent one.

use agentry_protocol::budget::BudgetLimits;
use proptest::prelude::*;
use proptest::sample::Index;

use super::model::limits_of;
use super::standin::TurnCost;

/// One step of a node: the model turn's cost, the tool calls it proposes, and
/// the child it carves with one of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepSpec {
    pub(crate) turn: TurnCost,
    pub(crate) calls: u64,
    pub(crate) spawn: Option<usize>,
}

/// What a node does next in the concurrent phase.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Step(StepSpec),
    /// A timer tick, then the step it wakes.
    Tick(StepSpec),
    /// An automatic retry of a failed call.
    Retry,
    /// The node ends (and with it its subtree).
    End,
}

/// A node: under `parent`, asking for `request`, carved by its parent's program
/// or by the embedder, then running `program`.
#[derive(Debug, Clone)]
pub(crate) struct NodePlan {
    pub(crate) parent: usize,
    pub(crate) request: BudgetLimits,
    pub(crate) by_embedder: bool,
    /// Yields of the embedder before it carves this node.
    pub(crate) embedder_pause: u8,
    pub(crate) program: Vec<Op>,
}

/// What the sequential phase does, at the `node`-th live node.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SeqOp {
    Step { node: Index, spec: StepSpec },
    Tick { node: Index, spec: StepSpec },
    Retry { node: Index },
    Reserve { node: Index, request: BudgetLimits },
    End { node: Index },
}

/// The whole case.
#[derive(Debug, Clone)]
pub(crate) struct TreePlan {
    pub(crate) root: BudgetLimits,
    /// Node 0 is the root (its parent and request are unused).
    pub(crate) nodes: Vec<NodePlan>,
    pub(crate) sequential: Vec<SeqOp>,
}

fn limit(max: u64, unlimited_weight: u32) -> impl Strategy<Value = Option<u64>> {
    prop_oneof![unlimited_weight => Just(None), 3 => (0..max).prop_map(Some)]
}

fn limits(scale: u64, unlimited_weight: u32) -> impl Strategy<Value = BudgetLimits> {
    let l = |max| limit(max * scale, unlimited_weight);
    (l(8), l(8), l(16), l(8), l(3), l(3))
        .prop_map(|(s, t, k, c, r, i)| limits_of([s, t, k, c, r, i]))
}

/// The root's limits: generous, so that most cases get to do something.
pub(crate) fn root_limits() -> impl Strategy<Value = BudgetLimits> {
    limits(4, 1)
}

/// A child's request: tight, so that reservations and spends run out.
pub(crate) fn request() -> impl Strategy<Value = BudgetLimits> {
    limits(1, 2)
}

fn step_spec() -> impl Strategy<Value = StepSpec> {
    (0u64..5, 0u64..5, 0u64..4, 0u64..4).prop_map(|(i, o, c, calls)| StepSpec {
        turn: TurnCost {
            tokens_in: i,
            tokens_out: o,
            cost_micros: c,
        },
        calls,
        spawn: None,
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => step_spec().prop_map(Op::Step),
        2 => step_spec().prop_map(Op::Tick),
        2 => Just(Op::Retry),
    ]
}

fn seq_op() -> impl Strategy<Value = SeqOp> {
    let node = any::<Index>;
    prop_oneof![
        4 => (node(), step_spec()).prop_map(|(node, spec)| SeqOp::Step { node, spec }),
        2 => (node(), step_spec()).prop_map(|(node, spec)| SeqOp::Tick { node, spec }),
        2 => node().prop_map(|node| SeqOp::Retry { node }),
        3 => (node(), request()).prop_map(|(node, request)| SeqOp::Reserve { node, request }),
        1 => node().prop_map(|node| SeqOp::End { node }),
    ]
}

/// What is drawn per node before the tree is assembled.
#[derive(Debug, Clone)]
struct Draw {
    pick: Index,
    request: BudgetLimits,
    by_embedder: bool,
    embedder_pause: u8,
    program: Vec<Op>,
    end_at: Option<Index>,
    spawn_at: Index,
}

fn draw() -> impl Strategy<Value = Draw> {
    (
        any::<Index>(),
        request(),
        any::<bool>(),
        0u8..4,
        proptest::collection::vec(op(), 0..8),
        proptest::option::weighted(0.3, any::<Index>()),
        any::<Index>(),
    )
        .prop_map(
            |(pick, request, by_embedder, embedder_pause, program, end_at, spawn_at)| Draw {
                pick,
                request,
                by_embedder,
                embedder_pause,
                program,
                end_at,
                spawn_at,
            },
        )
}

/// A random tree of 1 to 12 nodes with its programs and a sequential phase.
pub(crate) fn tree() -> impl Strategy<Value = TreePlan> {
    (
        root_limits(),
        proptest::collection::vec(draw(), 1..=12),
        proptest::collection::vec(seq_op(), 0..24),
    )
        .prop_map(|(root, draws, sequential)| assemble(root, draws, sequential))
}

/// Node i > 0 hangs under a node of depth < 4 with fewer than 5 children; a
/// node's program stops at its `End` (never the root's: its end is the
/// sequential phase's); a child carved by its parent is carved in a step of
/// its own, inserted in the parent's program before any `End`.
fn assemble(root: BudgetLimits, draws: Vec<Draw>, sequential: Vec<SeqOp>) -> TreePlan {
    let mut nodes: Vec<NodePlan> = Vec::new();
    let (mut depth, mut kids) = (Vec::<u32>::new(), Vec::<usize>::new());
    for (i, d) in draws.iter().enumerate() {
        let parent = if i == 0 {
            0
        } else {
            let open: Vec<usize> = (0..i).filter(|&j| depth[j] < 4 && kids[j] < 5).collect();
            open[d.pick.index(open.len())]
        };
        let mut program = d.program.clone();
        if let Some(at) = d.end_at.filter(|_| i > 0) {
            program.truncate(at.index(program.len() + 1));
            program.push(Op::End);
        }
        depth.push(if i == 0 { 0 } else { depth[parent] + 1 });
        kids.push(0);
        if i > 0 {
            kids[parent] += 1;
        }
        nodes.push(NodePlan {
            parent,
            request: d.request,
            by_embedder: d.by_embedder,
            embedder_pause: d.embedder_pause,
            program,
        });
    }
    for (i, d) in draws.iter().enumerate().skip(1) {
        if nodes[i].by_embedder {
            continue;
        }
        let parent = nodes[i].parent;
        let program = &mut nodes[parent].program;
        let open = program
            .iter()
            .take_while(|op| !matches!(op, Op::End))
            .count();
        let spawn = StepSpec {
            turn: TurnCost::default(),
            calls: 1,
            spawn: Some(i),
        };
        program.insert(d.spawn_at.index(open + 1), Op::Step(spawn));
    }
    TreePlan {
        root,
        nodes,
        sequential,
    }
}
