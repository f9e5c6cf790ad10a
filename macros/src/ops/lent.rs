//! An `Embed` of a calling model passed to a nested one (wmt's shared
//! embedding): the caller hands its table over as an input, and the nested
//! model looks tokens up in it and `attend`s with it.

use crate::paths;
use proc_macro2::TokenStream;
use quote::quote;

/// The table of `Embed` field `field` (`[V, F]` = `out`) on the tape `T`,
/// broadcast over the batch `__batch`: what a nested model it is passed to
/// takes (its gradient sums back into the parameter).
pub fn table(field: &syn::Ident, out: &[usize]) -> TokenStream {
    let (dfdx, rt) = (paths::dfdx(), paths::compact());
    let (v, f) = (crate::gen::lit(out[0]), crate::gen::lit(out[1]));
    let c = quote!(#dfdx::shapes::Const);
    quote!({
        let __p = self.#field.embedding.retaped::<T>();
        let __p = #dfdx::tensor_ops::BroadcastTo::try_broadcast_like::<_, #dfdx::shapes::Axis<0>>(__p, &(__batch, #c::<#v>, #c::<#f>))?;
        #dfdx::tensor_ops::TryMul::try_mul(__p, #rt::scalar::<E>(1.0))?
    })
}

/// `embed(ids)` of an `Embed` passed in: `args` the table, then the ids.
pub fn lookup(args: &[TokenStream]) -> TokenStream {
    let rt = paths::compact();
    let (table, ids) = (&args[0], &args[1]);
    quote!(#rt::table_lookup(#table, #ids)?)
}

/// `embed.attend(x)` of an `Embed` passed in: `args` `x`, then the table.
pub fn attend(args: &[TokenStream]) -> TokenStream {
    let rt = paths::compact();
    let (x, table) = (&args[0], &args[1]);
    quote!(#rt::table_attend(#x, #table)?)
}
