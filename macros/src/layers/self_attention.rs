//! `SelfAttention(num_heads, qkv_features = f, out_features = f,
//! dropout_rate = 0.0)(x, mask = m)`: Flax's `nn.SelfAttention` on
//! `[seq, f]`, an attention whose keys and values come from its queries'
//! input.

use super::multi_head_attention::{self, Attention};
use super::Site;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;

pub const SIG: Sig = Sig {
    params: multi_head_attention::PARAMS,
    required: &["num_heads"],
    example: "SelfAttention(num_heads = 4)(x)",
};

/// `[seq, f]` → `[seq, out_features]`.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(Attention, Vec<usize>)> {
    multi_head_attention::check("SelfAttention", b, site, cx)
}
