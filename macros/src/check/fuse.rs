//! Conv blocks: a `Conv` whose only reader is `relu`, and that `relu`'s
//! only reader an `avg_pool` / `max_pool` if there is one, run as one step
//! (the runtime's `conv_block`, one kernel on the CPU): Flax's everyday
//! `nn.avg_pool(nn.relu(nn.Conv(..)(x)), ..)` then writes no activation
//! and no pre-pool tensor to memory. The values and gradients are those of
//! the ops run one after the other, and the parameters keep their names.

use super::{Kind, Plan};
use crate::layers::Layer;
use crate::ops::{Activation, Op};

/// Rewrites every conv block of `plan`: its last step becomes
/// [`Kind::ConvBlock`], the steps it absorbed [`Kind::Folded`]. A step
/// that is the model's output, or that anything else reads, ends the block.
pub fn conv_blocks(plan: &mut Plan) {
    let n = plan.steps.len();
    let mut readers = vec![Vec::new(); n];
    for (k, s) in plan.steps.iter().enumerate() {
        for i in s.kind.inputs() {
            readers[i].push(k);
        }
    }
    let outputs: Vec<usize> = std::iter::once(plan.output)
        .chain(plan.more_outputs.iter().copied())
        .collect();
    let sole = |i: usize| match readers[i][..] {
        [r] if !outputs.contains(&i) => Some(r),
        _ => None,
    };
    for k in 0..n {
        let Kind::Field { field, inputs } = &plan.steps[k].kind else {
            continue;
        };
        let (field, &[input]) = (*field, &inputs[..]) else {
            continue;
        };
        if !matches!(plan.fields[field].layer, Layer::Conv(_)) {
            continue;
        }
        let is_relu = |kind: &Kind| {
            matches!(
                kind,
                Kind::Op {
                    op: Op::Activation(Activation::Relu),
                    ..
                }
            )
        };
        let Some(relu) = sole(k).filter(|&r| is_relu(&plan.steps[r].kind)) else {
            continue;
        };
        let pooled = sole(relu).filter(|&p| {
            matches!(
                plan.steps[p].kind,
                Kind::Op {
                    op: Op::Pool(_),
                    ..
                }
            )
        });
        let last = pooled.unwrap_or(relu);
        let pool = match std::mem::replace(&mut plan.steps[last].kind, Kind::Folded) {
            Kind::Op {
                op: Op::Pool(pool), ..
            } => Some(pool),
            _ => None,
        };
        plan.steps[k].kind = Kind::Folded;
        plan.steps[relu].kind = Kind::Folded;
        plan.steps[last].kind = Kind::ConvBlock {
            field,
            input,
            relu: true,
            pool,
        };
    }
}
