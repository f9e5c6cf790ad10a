//! A diffusion U-Net as DDPM-style Flax code writes it: a timestep
//! embedding (`get_timestep_embedding`), residual blocks with GroupNorm and
//! the embedding added per channel, self-attention at the lowest
//! resolution, and skips kept in a list (`hs.append(h)` on the way down,
//! `hs.pop()` on the way up). Against Flax (`tests/python/make_flax_unet.py`,
//! `fixtures/flax_port_unet.{msgpack,json}`): parameter count and paths,
//! the checkpoint as `to_bytes` wrote it, outputs within 1e-5 (f32) and
//! 1e-9 (f64), gradients within 1e-4 (f32) and 1e-9 (f64), and a training
//! step.

#[path = "common/fixture.rs"]
mod fixture;
#[path = "common/flax_files.rs"]
mod flax_files;

use fixture::{assert_rel, Arr};
use flax_files::{assert_grads, f32s, fixture, flax_grads, load_as_flax_wrote_it};
use flaxen::interop::flax;
use flaxen::prelude::*;

/// `ResBlock(features)(x, temb)`: two GroupNorm-swish-conv steps, the
/// projected timestep embedding added per channel between them, and a
/// 1x1 `skip` projection when the channels change.
pub struct ResBlock;

#[compact]
impl ResBlock {
    fn forward(x: Input<8, 8, 8>, temb: Input<32>, features: Param<8>, groups: Param<4>) {
        let h = swish(GroupNorm(num_groups = groups)(x));
        let h = Conv(features, (3, 3))(h);
        let h = h + reshape(Dense(features)(swish(temb)), (features, 1, 1));
        let h = swish(GroupNorm(num_groups = groups)(h));
        let h = Conv(features, (3, 3))(h);
        let x = if x.shape[-3] != features {
            Conv(features, (1, 1), name = "skip")(x)
        } else {
            x
        };
        x + h
    }
}

/// `AttnBlock()(x)`: GroupNorm, self-attention over the `h * w` pixels,
/// residual.
pub struct AttnBlock;

#[compact]
impl AttnBlock {
    fn forward(x: Input<16, 4, 4>, heads: Param<2>) {
        let (c, h, w) = x.shape;
        let y = GroupNorm(num_groups = 4)(x);
        let y = transpose(reshape(y, (c, h * w)), (-1, -2));
        let y = SelfAttention(num_heads = heads)(y);
        x + reshape(transpose(y, (-1, -2)), (c, h, w))
    }
}

/// The U-Net: `ch` channels, `ch_mult` per level, one `ResBlock` down and
/// two up per level, `AttnBlock` in the middle.
pub struct UNet;

#[compact]
impl UNet {
    fn forward(x: Input<3, 8, 8>, t: Input<1>, ch: Param<8>, ch_mult: Param<{ (1, 2) }>) {
        // get_timestep_embedding(t, ch)
        let half = ch / 2;
        let e = log(10000.0) / (half - 1);
        let e = t * exp(arange(half) * -e);
        let temb = concatenate((sin(e), cos(e)), axis = -1);
        let temb = Dense(ch * 4)(temb);
        let temb = Dense(ch * 4)(swish(temb));

        let mut hs = vec![Conv(ch, (3, 3))(x)];
        for (i, mult) in enumerate(ch_mult) {
            let h = ResBlock(ch * mult)(hs[-1], temb);
            hs.push(h);
            if i != len(ch_mult) - 1 {
                hs.push(avg_pool(h, (2, 2), strides = (2, 2)));
            }
        }
        let mut h = hs[-1];
        h = ResBlock(h.shape[-3])(h, temb);
        h = AttnBlock()(h);
        h = ResBlock(h.shape[-3])(h, temb);
        for i in 0..len(ch_mult) {
            let level = len(ch_mult) - 1 - i;
            for _ in 0..2 {
                h = ResBlock(ch * ch_mult[level])(concatenate((h, hs.pop()), axis = -3), temb);
            }
            if level != 0 {
                let (c, hh, ww) = h.shape;
                h = resize(h, (c, hh * 2, ww * 2), method = "nearest");
            }
        }
        let h = swish(GroupNorm(num_groups = 4)(h));
        Conv(x.shape[-3], (3, 3))(h)
    }
}

#[derive(serde::Deserialize)]
struct Extra {
    t: Arr,
    loss: f64,
    out_f64: Arr,
    loss_f64: f64,
}

const BYTES: &[u8] = include_bytes!("fixtures/flax_port_unet.msgpack");
const JSON: &str = include_str!("fixtures/flax_port_unet.json");

#[test]
fn unet_loads_matches_flax_and_trains() {
    let f = fixture(JSON);
    let extra: Extra = serde_json::from_str(JSON).unwrap();
    let dev = Cpu::default();
    let mut model = dev.build_module::<UNet, f32>();
    load_as_flax_wrote_it(&mut model, BYTES, &f);

    let x: Tensor<Rank4<2, 3, 8, 8>, f32, Cpu> = dev.tensor(f32s(f.x.as_ref().unwrap()));
    let t: Tensor<Rank2<2, 1>, f32, Cpu> = dev.tensor(f32s(&extra.t));
    let w: Tensor<Rank4<2, 3, 8, 8>, f32, Cpu> = dev.tensor(f32s(f.w.as_ref().unwrap()));
    let out = model.forward((x.clone(), t.clone()));
    assert_rel(
        "out",
        &out.as_vec(),
        &f.out.as_ref().unwrap().data,
        1e-5,
        1.0,
    );
    let loss = f64::from((out * w.clone()).sum::<Rank0, _>().array());
    assert!((loss - extra.loss).abs() < 1e-4 * extra.loss.abs().max(1.0));
    let grads = (model.forward((x.clone().traced(model.alloc_grads()), t.clone())) * w.clone())
        .sum()
        .backward();
    assert_grads(&flax_grads(&model, &grads), &f.grads_f64, 1e-4);

    // Training: Adam on a denoising-style loss goes down.
    let mut state = TrainState::create(model, adam(3e-3)).unwrap();
    let mut losses = Vec::new();
    for _ in 0..30 {
        let (l, grads) = state
            .value_and_grad(|m, tape| {
                let y = m.forward_mut((x.clone().put_tape(tape), t.clone()));
                (y - x.clone()).square().mean()
            })
            .unwrap();
        state.apply_gradients(grads).unwrap();
        losses.push(l.array());
    }
    assert!(losses[29] < 0.5 * losses[0], "{losses:?}");
}

#[test]
fn unet_in_f64_matches_flax_in_f64() {
    let f = fixture(JSON);
    let extra: Extra = serde_json::from_str(JSON).unwrap();
    let dev = Cpu::default();
    let mut model = dev.build_module::<UNet, f64>();
    flax::load(&mut model, BYTES).unwrap();
    let x: Tensor<Rank4<2, 3, 8, 8>, f64, Cpu> = dev.tensor(f.x.as_ref().unwrap().data.clone());
    let t: Tensor<Rank2<2, 1>, f64, Cpu> = dev.tensor(extra.t.data.clone());
    let w: Tensor<Rank4<2, 3, 8, 8>, f64, Cpu> = dev.tensor(f.w.as_ref().unwrap().data.clone());
    let out = model.forward((x.clone(), t.clone()));
    assert_rel("out", &out.as_vec(), &extra.out_f64.data, 1e-9, 1.0);
    let loss = (out * w.clone()).sum::<Rank0, _>().array();
    assert!((loss - extra.loss_f64).abs() < 1e-9 * extra.loss_f64.abs().max(1.0));
    let grads = (model.forward((x.traced(model.alloc_grads()), t)) * w)
        .sum()
        .backward();
    assert_grads(&flax_grads(&model, &grads), &f.grads_f64, 1e-9);
}

/// The loaded model on dfdx's `Cuda` device (compiled by CI's
/// `cuda,ci-check` check, run where a GPU is): Flax's outputs there too.
#[cfg(feature = "cuda")]
#[test]
fn unet_on_cuda_matches_flax() {
    let f = fixture(JSON);
    let extra: Extra = serde_json::from_str(JSON).unwrap();
    let mut model = Cpu::default().build_module::<UNet, f32>();
    flax::load(&mut model, BYTES).unwrap();
    let dev = Cuda::default();
    let model = model.to_device(&dev);
    let x: Tensor<Rank4<2, 3, 8, 8>, f32, Cuda> = dev.tensor(f32s(f.x.as_ref().unwrap()));
    let t: Tensor<Rank2<2, 1>, f32, Cuda> = dev.tensor(f32s(&extra.t));
    let out = model.forward((x, t));
    assert_rel(
        "out",
        &out.as_vec(),
        &f.out.as_ref().unwrap().data,
        1e-4,
        1.0,
    );
}
