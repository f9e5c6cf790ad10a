//! `Dropout(rate)`: Flax's `nn.Dropout`, active only when training
//! (`forward_mut` with a tape).

use super::Site;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::ops::Op;

pub const SIG: Sig = Sig {
    params: &["rate", "name"],
    required: &["rate"],
    example: "Dropout(rate = 0.5)(x)",
};

/// The rate, in [0, 1).
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<Op> {
    let _ = site;
    let rate = b.req(cx, "rate", |a| a.float("`rate`"))?;
    if !(0.0..1.0).contains(&rate) {
        if let Some(a) = b.get("rate") {
            cx.error_at(a, format!("`rate` is the probability of dropping an element and must be in [0, 1), but is {rate}"));
        }
        return None;
    }
    Some(Op::Dropout(rate))
}
