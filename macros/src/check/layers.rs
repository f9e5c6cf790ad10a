//! Checking of the layers with parameters (`Dense`, `Conv`, `Dropout`,
//! `BatchNorm`, `LayerNorm`) and of nested `#[compact]` models.

use super::{first_span, layers, lit, nn, Checker, Field, Kind, Val};
use crate::parse::{Arg, Expr};
use crate::shape::{self, show, AxisPad, Dim};
use crate::vocab::{self, bind, LAYERS, OPS};
use proc_macro2::TokenStream;
use quote::{format_ident, quote, ToTokens};
use syn::Error;

impl Checker {
    pub(super) fn layer(
        &mut self,
        path: &syn::Path,
        x: Val,
        input: &Expr,
        args: &[Arg],
        tokens: &TokenStream,
    ) -> Val {
        let last = path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default();
        let known = path.segments.len() == 1 && LAYERS.contains(&last.as_str());
        if !known {
            if OPS.contains(&last.as_str()) {
                self.errs.push(Error::new_spanned(
                    tokens,
                    format!("`{last}` is an op, not a layer: call it as `{last}(x)`"),
                ));
                return Val::Poison;
            }
            // A single name close to a built-in one is most likely a typo; a
            // nested model with such a name can be written as a path
            // (`self::Conv2()(x)`).
            let near = || vocab::nearest(&last, LAYERS).or_else(|| vocab::nearest(&last, OPS));
            if let Some(s) = near().filter(|_| path.segments.len() == 1) {
                let form = if LAYERS.contains(&s) {
                    format!("`{s}(..)(x)`")
                } else {
                    format!("`{s}(x)`")
                };
                self.errs.push(Error::new_spanned(
                    path,
                    format!("unknown layer `{last}`; did you mean {form}?"),
                ));
                return Val::Poison;
            }
            return self.nested(path, &last, x, input, args, tokens);
        }
        let bound = bind(&last, &last, args, tokens, &mut self.errs);
        let Some(i) = self.tensor_input(x, &last, tokens) else {
            return Val::Poison;
        };
        let s = self.shape(i).to_vec();
        match last.as_str() {
            "Dense" => {
                let feats = bound
                    .get("features")
                    .and_then(|e| self.errs.take(vocab::positive(e, "`features`")));
                let bias = match bound.get("use_bias") {
                    Some(e) => self.errs.take(vocab::boolean(e, "`use_bias`")),
                    None => Some(true),
                };
                if s.len() > 2 {
                    let hint = match input {
                        Expr::Var(v) => format!("flatten({v})"),
                        _ => "flatten(..)".to_string(),
                    };
                    self.errs.push(Error::new_spanned(tokens, format!(
                        "`Dense` needs a [features] input, but {} has shape {} here\nhelp: call `{hint}` first",
                        input.describe(), show(&s)
                    )));
                    return Val::Poison;
                }
                let name = self.field_name("dense", &bound, tokens);
                let (Some(o), Some(bias), Some(name)) = (feats, bias, name) else {
                    return Val::Poison;
                };
                let inf = s[s.len() - 1].clone();
                let ig = inf.generic();
                // flaxen's own layers: Flax's lecun_normal init, which
                // dfdx's `Linear` lacks, with its keys and layout.
                let (ol, l) = (lit(o), layers());
                let ty = if bias {
                    quote!(#l::Dense<#ig, #ol, E, D>)
                } else {
                    quote!(#l::UnbiasedDense<#ig, #ol, E, D>)
                };
                let params = match inf.known() {
                    Some(f) => {
                        Dim::Known(shape::params(&[f, o]).saturating_add(if bias { o } else { 0 }))
                    }
                    None => {
                        let fe = inf.expr();
                        let b = if bias { o } else { 0 };
                        Dim::Sym(quote!(#fe * #o + #b), format!("{inf}*{o}+{b}"))
                    }
                };
                let mut out = s.clone();
                let last_ix = out.len() - 1;
                out[last_ix] = Dim::Known(o);
                self.field(
                    name,
                    ty,
                    params,
                    Vec::new(),
                    i,
                    out,
                    format!("`Dense({o})`"),
                )
            }
            "Conv" => {
                let feats = bound
                    .get("features")
                    .and_then(|e| self.errs.take(vocab::positive(e, "`features`")));
                let k = bound
                    .get("kernel_size")
                    .and_then(|e| self.errs.take(vocab::pair(e, "a kernel size")));
                let st = match bound.get("strides") {
                    Some(e) => self.errs.take(vocab::pair(e, "a stride")),
                    None => Some((1, 1)),
                };
                let pad = match bound.get("padding") {
                    Some(e) => self.errs.take(vocab::padding(e)),
                    None => Some((AxisPad::Same, AxisPad::Same)),
                };
                if let Some(e) = bound.get("use_bias") {
                    if let Some(false) = self.errs.take(vocab::boolean(e, "`use_bias`")) {
                        self.errs.push(Error::new_spanned(e, "`Conv(use_bias = false)` is not supported yet: flaxen's conv layer always has a bias"));
                        return Val::Poison;
                    }
                }
                if s.len() != 3 {
                    return self.needs_image("Conv", input, &s, tokens);
                }
                let name = self.field_name("conv", &bound, tokens);
                let (Some(o), Some(k), Some(st), Some(pad)) = (feats, k, st, pad) else {
                    return Val::Poison;
                };
                let Some([wh, ww]) = self.windows("Conv", &s, k, st, pad, input, tokens) else {
                    return Val::Poison;
                };
                let Some(name) = name else { return Val::Poison };
                let l = layers();
                let (c, h, w) = (s[0].generic(), s[1].generic(), s[2].generic());
                let (kh, kw, sh, sw) = (lit(k.0), lit(k.1), lit(st.0), lit(st.1));
                let (pt, pb, pl, pr) = (
                    wh.pad_lo.generic(),
                    wh.pad_hi.generic(),
                    ww.pad_lo.generic(),
                    ww.pad_hi.generic(),
                );
                let (oh, ow) = (wh.out.generic(), ww.out.generic());
                let ol = lit(o);
                let ty = quote!(#l::Conv2D<#c, #ol, #kh, #kw, #sh, #sw, #pt, #pb, #pl, #pr, #h, #w, #oh, #ow, E, D>);
                let params = match s[0].known() {
                    Some(cn) => Dim::Known(shape::params(&[o, cn, k.0, k.1]).saturating_add(o)),
                    None => {
                        let ce = s[0].expr();
                        Dim::Sym(
                            quote!(#o * #ce * #kh * #kw + #o),
                            format!("{o}*{}*{kh}*{kw}+{o}", s[0]),
                        )
                    }
                };
                let out = vec![Dim::Known(o), wh.out, ww.out];
                let v = self.field(
                    name,
                    ty,
                    params,
                    Vec::new(),
                    i,
                    out,
                    format!("`Conv({o}, {kh}x{kw}, strides {sh}x{sw})`"),
                );
                if let Some(f) = self.fields.last_mut() {
                    f.skips_input_grad = true;
                }
                v
            }
            "SelfAttention" => self.self_attention(&bound, i, input, tokens),
            "Dropout" => {
                let rate = bound
                    .get("rate")
                    .and_then(|e| self.errs.take(vocab::float(e, "`rate`")));
                let Some(rate) = rate else { return Val::Poison };
                if !(0.0..1.0).contains(&rate) {
                    if let Some(e) = bound.get("rate") {
                        self.errs.push(Error::new_spanned(e, format!("`rate` is the probability of dropping an element and must be in [0, 1), but is {rate}")));
                    }
                    return Val::Poison;
                }
                self.push(
                    Kind::Dropout(rate, i),
                    s,
                    Some(format!("`Dropout({rate})`")),
                )
            }
            "BatchNorm" | "LayerNorm" | "RMSNorm" | "GroupNorm" => {
                self.norm(&last, &bound, i, input, tokens)
            }
            _ => Val::Poison,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn field(
        &mut self,
        name: syn::Ident,
        ty: TokenStream,
        params: Dim,
        init: Vec<TokenStream>,
        input: usize,
        out: Vec<Dim>,
        what: String,
    ) -> Val {
        let doc = format!("`{name}`: {what}");
        self.fields.push(Field {
            name,
            ty,
            params,
            init,
            skips_input_grad: false,
        });
        self.push(Kind::Field(self.fields.len() - 1, input), out, Some(doc))
    }

    /// The number literal bound to `key`, or `default`; an error at the
    /// literal when it is not a number or `ok` rejects it.
    fn bounded_float(
        &mut self,
        bound: &std::collections::BTreeMap<&'static str, &syn::Expr>,
        key: &str,
        default: f64,
        ok: fn(f64) -> bool,
        rule: &str,
    ) -> Option<f64> {
        let Some(e) = bound.get(key) else {
            return Some(default);
        };
        let v = self.errs.take(vocab::float(e, &format!("`{key}`")))?;
        if ok(v) {
            Some(v)
        } else {
            self.errs
                .push(Error::new_spanned(e, format!("`{key}` {rule}, but is {v}")));
            None
        }
    }

    fn norm(
        &mut self,
        kind: &str,
        bound: &std::collections::BTreeMap<&'static str, &syn::Expr>,
        i: usize,
        input: &Expr,
        tokens: &TokenStream,
    ) -> Val {
        let s = self.shape(i).to_vec();
        let (nn, layers) = (nn(), layers());
        // Flax's defaults, which differ from dfdx's: BatchNorm momentum 0.99,
        // epsilon 1e-5; the other norms epsilon 1e-6. BatchNorm, RMSNorm and
        // GroupNorm are the runtime's; LayerNorm is dfdx's, which already
        // matches Flax.
        let eps_default = if kind == "BatchNorm" { 1e-5 } else { 1e-6 };
        let eps = self.bounded_float(
            bound,
            "epsilon",
            eps_default,
            |v| v > 0.0,
            "is added to the variance before its square root and must be greater than 0",
        );
        let mut init = Vec::new();
        if kind == "BatchNorm" {
            let momentum = self.bounded_float(
                bound,
                "momentum",
                0.99,
                |v| (0.0..=1.0).contains(&v),
                "is the weight of the old running statistics and must be in [0, 1]",
            );
            init.push(momentum.map(|m| quote!(__f.momentum = #m;)));
        }
        let (features, per_feature) = match (kind, s.len()) {
            ("BatchNorm" | "GroupNorm", 3) | ("BatchNorm", 1) => (s[0].clone(), 2),
            ("LayerNorm", 1 | 2) => (s[s.len() - 1].clone(), 2),
            ("RMSNorm", 1 | 2) => (s[s.len() - 1].clone(), 1),
            _ => {
                let want = match kind {
                    "BatchNorm" => "[features] or [channels, height, width]",
                    "GroupNorm" => "[channels, height, width]",
                    _ => "[features] or [seq, features]",
                };
                self.errs.push(Error::new_spanned(
                    tokens,
                    format!(
                        "`{kind}` needs a {want} input, but {} has shape {} here",
                        input.describe(),
                        show(&s)
                    ),
                ));
                return Val::Poison;
            }
        };
        let fg = features.generic();
        let ty = match kind {
            "BatchNorm" => Some(quote!(#layers::BatchNorm<#fg, E, D>)),
            "LayerNorm" => Some(quote!(#nn::LayerNorm1D<#fg, E, D>)),
            "RMSNorm" => Some(quote!(#layers::RmsNorm<#fg, E, D>)),
            _ => self
                .groups(bound, &features, input, tokens)
                .map(|g| quote!(#layers::GroupNorm<#fg, #g, E, D>)),
        };
        let base = vocab::snake(kind);
        let name = self.field_name(&base, bound, tokens);
        let init: Option<Vec<TokenStream>> = init.into_iter().collect();
        let (Some(eps), Some(mut init), Some(ty), Some(name)) = (eps, init, ty, name) else {
            return Val::Poison;
        };
        init.push(quote!(__f.epsilon = #eps;));
        let params = match features.known() {
            Some(f) => Dim::Known(f.saturating_mul(per_feature)),
            None => {
                let fe = features.expr();
                Dim::Sym(
                    quote!(#per_feature * #fe),
                    format!("{per_feature}*{features}"),
                )
            }
        };
        self.field(name, ty, params, init, i, s, format!("`{kind}`"))
    }

    /// Flax's `SelfAttention(num_heads, qkv_features = F, out_features = F)`
    /// on `[seq, F]`: `[seq, out_features]`.
    fn self_attention(
        &mut self,
        bound: &std::collections::BTreeMap<&'static str, &syn::Expr>,
        i: usize,
        input: &Expr,
        tokens: &TokenStream,
    ) -> Val {
        let s = self.shape(i).to_vec();
        let mut size = |key: &str| {
            bound
                .get(key)
                .map(|e| self.errs.take(vocab::positive(e, &format!("`{key}`"))))
        };
        let (heads, qkv, out) = (
            size("num_heads"),
            size("qkv_features"),
            size("out_features"),
        );
        if s.len() != 2 {
            self.errs.push(Error::new_spanned(
                tokens,
                format!(
                    "`SelfAttention` needs a [seq, features] input, but {} has shape {} here",
                    input.describe(),
                    show(&s)
                ),
            ));
            return Val::Poison;
        }
        let name = self.field_name("self_attention", bound, tokens);
        let (Some(Some(h)), Some(name)) = (heads, name) else {
            return Val::Poison;
        };
        let f = s[1].clone();
        let pick = |v: Option<Option<usize>>| match v {
            None => Some(f.clone()),
            Some(n) => n.map(Dim::Known),
        };
        let (Some(qkv), Some(out)) = (pick(qkv), pick(out)) else {
            return Val::Poison;
        };
        if let Some(q) = qkv.known() {
            if q % h != 0 {
                self.errs.push(Error::new_spanned(
                    tokens,
                    format!("`SelfAttention` splits its {q} qkv features into {h} heads, which needs {q} divisible by {h}"),
                ));
                return Val::Poison;
            }
        }
        let params = match (f.known(), qkv.known(), out.known()) {
            (Some(f), Some(q), Some(o)) => {
                let proj = shape::params(&[f, q]).saturating_add(q);
                Dim::Known(
                    proj.saturating_mul(3)
                        .saturating_add(shape::params(&[q, o]))
                        .saturating_add(o),
                )
            }
            _ => {
                let (fe, qe, oe) = (f.expr(), qkv.expr(), out.expr());
                Dim::Sym(
                    quote!(3 * (#fe * #qe + #qe) + #qe * #oe + #oe),
                    format!("3*({f}*{qkv}+{qkv})+{qkv}*{out}+{out}"),
                )
            }
        };
        let (l, fg, qg, og) = (layers(), f.generic(), qkv.generic(), out.generic());
        let ty = quote!(#l::SelfAttention<#fg, #qg, #h, #og, E, D>);
        let out_shape = vec![s[0].clone(), out.clone()];
        self.field(
            name,
            ty,
            params,
            Vec::new(),
            i,
            out_shape,
            format!("`SelfAttention({h} heads, {qkv} qkv features)`"),
        )
    }

    /// `GroupNorm`'s number of groups: `num_groups` (Flax's default 32) or
    /// `channels / group_size`, which must divide the channels.
    fn groups(
        &mut self,
        bound: &std::collections::BTreeMap<&'static str, &syn::Expr>,
        channels: &Dim,
        input: &Expr,
        tokens: &TokenStream,
    ) -> Option<TokenStream> {
        let mut take = |key: &str| {
            bound
                .get(key)
                .map(|e| (*e, self.errs.take(vocab::positive(e, &format!("`{key}`")))))
        };
        enum Split {
            Groups(usize),
            Size(usize),
        }
        let split = match (take("num_groups"), take("group_size")) {
            (Some((e, _)), Some(_)) => {
                self.errs.push(Error::new_spanned(
                    e,
                    "`GroupNorm` takes `num_groups` or `group_size`, not both",
                ));
                return None;
            }
            (Some((_, g)), None) => Split::Groups(g?),
            (None, Some((_, n))) => Split::Size(n?),
            (None, None) => Split::Groups(32),
        };
        let Some(c) = channels.known() else {
            // Channels from a nested model's consts: the layer's own
            // `const` assertion checks the division.
            let ce = channels.expr();
            return Some(match split {
                Split::Groups(g) => quote!(#g),
                Split::Size(n) => quote!({ #ce / #n }),
            });
        };
        let defaulted = !bound.contains_key("num_groups") && !bound.contains_key("group_size");
        let (g, per_group, rule) = match split {
            Split::Groups(g) if defaulted => {
                (g, c / g, format!("Flax's default `num_groups = {g}`"))
            }
            Split::Groups(g) => (g, c / g, format!("`num_groups = {g}`")),
            Split::Size(n) => (c / n, n, format!("`group_size = {n}`")),
        };
        if g == 0 || g * per_group != c {
            self.errs.push(Error::new_spanned(
                tokens,
                format!(
                    "`GroupNorm` with {rule} needs channels that split into equal groups, but {} has {c} channels",
                    input.describe()
                ),
            ));
            return None;
        }
        Some(quote!(#g))
    }

    fn nested(
        &mut self,
        path: &syn::Path,
        last: &str,
        x: Val,
        input: &Expr,
        args: &[Arg],
        tokens: &TokenStream,
    ) -> Val {
        // `name` is ours; any other argument is a parameter of the nested
        // model, which is then instantiated for this input shape.
        let (named, params): (Vec<&Arg>, Vec<&Arg>) = args
            .iter()
            .partition(|a| a.key.as_ref().is_some_and(|k| k == "name"));
        let named: Vec<Arg> = named
            .into_iter()
            .map(|a| Arg {
                key: a.key.clone(),
                value: a.value.clone(),
            })
            .collect();
        let bound = bind(last, "nested", &named, tokens, &mut self.errs);
        if let Some(p) = params.iter().find(|p| p.key.is_none()) {
            self.errs.push(Error::new_spanned(
                &p.value,
                format!("pass the parameters of the nested model `{last}` by name, e.g. `{last}(features = 64)(x)`"),
            ));
            return Val::Poison;
        }
        let Some(i) = self.tensor_input(x, last, tokens) else {
            return Val::Poison;
        };
        let s = self.shape(i).to_vec();
        let name = self.field_name(&vocab::snake(last), &bound, tokens);
        let Some(name) = name else { return Val::Poison };
        let rt = shape::rt_compact();
        if let Some(src) = self.sources.get(&crate::nest::key(path)).cloned() {
            let args = params
                .iter()
                .filter_map(|p| Some((p.key.clone()?, p.value.to_token_stream())))
                .collect();
            return self.inline(path, last, name, src, args, i, input, tokens);
        }
        let ct = quote!(<#path as #rt::Compact>);
        if !params.is_empty() {
            self.errs.push(Error::new_spanned(tokens, format!("`{last}` takes parameters only when its `#[compact]` source is known; is it a `#[compact]` model of this crate?")));
            return Val::Poison;
        }
        let r = s.len();
        let in_consts = [quote!(IN_0), quote!(IN_1), quote!(IN_2)];
        let dims = s.iter().zip(&in_consts).map(|(d, c)| {
            let e = d.expr();
            quote!(#ct::#c == #e)
        });
        let span = first_span(tokens);
        let ptxt = path.to_token_stream().to_string().replace(' ', "");
        let input_ok = quote!(#ct::IN_RANK == #r #(&& #dims)*);
        self.assert_dependent(
            input_ok.clone(),
            format!("`{ptxt}` is called on {} of shape {}, which is not the input shape `{ptxt}` declares in its `fn forward`", input.describe(), show(&s)),
            span,
        );
        let rank_ok = quote!(#ct::OUT_RANK == #r);
        self.assert_dependent(
            rank_ok.clone(),
            format!("`{ptxt}` changes the rank of its input; a nested model must return as many axes as it takes"),
            span,
        );
        self.guards.push(quote!(#input_ok && #rank_ok));
        let out_consts = ["OUT_0", "OUT_1", "OUT_2"];
        let out: Vec<Dim> = out_consts[..r]
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let c = format_ident!("{}", c);
                Dim::Sym(quote!(#ct::#c), format!("{ptxt}.out[{k}]"))
            })
            .collect();
        let ty = quote!(#ct::Module<E, D>);
        let params = Dim::Sym(quote!(#ct::NUM_PARAMS), format!("{ptxt}::NUM_PARAMS"));
        self.field(
            name,
            ty,
            params,
            Vec::new(),
            i,
            out,
            format!("nested `{ptxt}`"),
        )
    }

    /// Instantiates a nested model for this call: as declared when it gets
    /// no parameters, else for `x`'s shape with the given values.
    #[allow(clippy::too_many_arguments)]
    fn inline(
        &mut self,
        path: &syn::Path,
        last: &str,
        name: syn::Ident,
        src: TokenStream,
        args: Vec<(syn::Ident, TokenStream)>,
        i: usize,
        input: &Expr,
        tokens: &TokenStream,
    ) -> Val {
        let s = self.shape(i).to_vec();
        if let Err(e) = crate::nest::check_depth(self.depth, tokens) {
            self.errs.push(e);
            return Val::Poison;
        }
        let Some(dims) = s.iter().map(Dim::known).collect::<Option<Vec<usize>>>() else {
            self.errs.push(Error::new_spanned(tokens, format!("`{last}` is instantiated for the shape of its input, but {} has shape {} here, which the macro does not know", input.describe(), show(&s))));
            return Val::Poison;
        };
        let ident = format_ident!("__{}_{}", self.outer, name);
        let with_params = !args.is_empty();
        let inst = crate::parse::Instance {
            ident: ident.clone(),
            dims: dims.clone(),
            args,
        };
        let model = match crate::parse::parse_model(src, Some(&inst)) {
            Ok(m) => m,
            Err(e) => {
                // Without parameters, the model's own expansion reports it.
                if with_params {
                    self.errs.push(e);
                }
                return Val::Poison;
            }
        };
        if !with_params && model.declared != dims {
            let decl: Vec<String> = model.declared.iter().map(ToString::to_string).collect();
            self.errs.push(Error::new_spanned(tokens, format!(
                "`{last}` takes input of shape [{}] (its `fn forward` declares `Input<{}>`), but {} has shape {} here\nhelp: pass parameters (`{last}(name = value)(x)`) to instantiate it for this shape, or change the input",
                decl.join(", "), decl.join(", "), input.describe(), show(&s)
            )));
            return Val::Poison;
        }
        let ptxt = path.to_token_stream().to_string().replace(' ', "");
        let plan = match super::check_with(model, &self.sources, self.depth + 1) {
            Ok(p) => p,
            Err(e) => {
                if with_params {
                    self.errs.push(e);
                    self.errs.push(Error::new_spanned(
                        tokens,
                        format!(
                            "in this instance of `{ptxt}` for {} of shape {}",
                            input.describe(),
                            show(&s)
                        ),
                    ));
                }
                return Val::Poison;
            }
        };
        let out = plan.steps[plan.output].shape.clone();
        let params = plan
            .fields
            .iter()
            .map(|f| f.params.known())
            .sum::<Option<usize>>();
        let params = params.map(Dim::Known).unwrap_or_else(|| {
            let rt = shape::rt_compact();
            Dim::Sym(
                quote!(<#ident as #rt::Compact>::NUM_PARAMS),
                format!("{ptxt}::NUM_PARAMS"),
            )
        });
        self.inlined.push(plan);
        let rt = shape::rt_compact();
        // Refer to the nested model as written, as a user of it: a private
        // model only ever called as a layer is not dead code, and rustc
        // checks the path names a `#[compact]` model.
        self.asserts.push(super::Assert {
            cond: quote!(<#path as #rt::Compact>::IN_RANK > 0),
            msg: format!("`{ptxt}` is not a `#[compact]` model"),
            span: first_span(tokens),
        });
        let ty = quote!(<#ident as #rt::Compact>::Module<E, D>);
        self.field(name, ty, params, Vec::new(), i, out, format!("`{ptxt}`"))
    }
}
