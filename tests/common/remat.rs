//! The networks and helpers of `tests/remat.rs` and `tests/cuda_remat.rs`
//! (included with `#[path = "common/remat.rs"] mod remat_common;`): a
//! residual network with convolutions and BatchNorm, plain and with its
//! blocks under `remat`, and each trainable tensor's gradient by key.
#![allow(dead_code)]

use flaxen::dfdx::nn::tensor_collection::{
    RecursiveWalker, TensorCollection, TensorOptions, TensorVisitor, ViewTensorName, ViewTensorRef,
};
use flaxen::dfdx::tensor::{Gradients, Storage};
use flaxen::prelude::*;
use flaxen::runtime::checkpoint::save_module_state;
use flaxen::runtime::state::StateMap;
use std::collections::BTreeMap;

/// A residual block as Flax's ResNet writes it: two 3x3 convolutions
/// without bias, each followed by BatchNorm, the first by relu.
pub struct ResBlock;

#[compact]
impl ResBlock {
    fn forward(x: Input<8, 8, 8>, features: Param<8>) {
        let y = relu(BatchNorm()(Conv(features, (3, 3), use_bias = false)(x)));
        let y = BatchNorm()(Conv(features, (3, 3), use_bias = false)(y));
        relu(x + y)
    }
}

/// The network, plain.
pub struct Plain;

#[compact]
impl Plain {
    fn forward(x: Input<3, 8, 8>) {
        let x = relu(Conv(8, (3, 3))(x));
        let x = ResBlock()(x);
        // The second block's input also has a gradient from outside it.
        let x = x + ResBlock()(x);
        let x = mean(x, axis = (-2, -1));
        Dense(4)(x)
    }
}

/// The same network with both blocks under `remat`.
pub struct Checkpointed;

#[compact]
impl Checkpointed {
    fn forward(x: Input<3, 8, 8>) {
        let x = relu(Conv(8, (3, 3))(x));
        let x = remat(ResBlock())(x);
        let x = x + remat(ResBlock(features = 8))(x);
        let x = mean(x, axis = (-2, -1));
        Dense(4)(x)
    }
}

/// Every trainable tensor's gradient by checkpoint key.
struct GradsByKey<'a, E, D: Storage<E>> {
    grads: &'a Gradients<E, D>,
    out: BTreeMap<String, Vec<E>>,
}

impl<E: Dtype, D: Device<E>> TensorVisitor<E, D> for GradsByKey<'_, E, D> {
    type Viewer = (ViewTensorRef, ViewTensorName);
    type Err = std::convert::Infallible;
    type E2 = E;
    type D2 = D;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, E, D>,
        (t, name): (&Tensor<S, E, D>, String),
    ) -> Result<Option<Tensor<S, E, D>>, Self::Err> {
        if opts.do_gradient_update {
            self.out.insert(name, self.grads.get(t).as_vec());
        }
        Ok(None)
    }
}

pub fn grads_by_key<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    m: &M,
    grads: &Gradients<E, D>,
) -> BTreeMap<String, Vec<E>> {
    let mut v = GradsByKey {
        grads,
        out: BTreeMap::new(),
    };
    let _ = M::iter_tensors(&mut RecursiveWalker {
        m: (m, String::new()),
        f: &mut v,
    });
    v.out
}

pub fn state<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(m: &M) -> StateMap<E> {
    let mut s = StateMap::new();
    save_module_state(m, "", &mut s);
    s
}
