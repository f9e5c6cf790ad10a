//! Checks against Flax checkpoints shared by the tests that load them
//! (`interop_structured.rs`, `flax_ports.rs`): a model's Flax paths, its
//! gradients as Flax lays them out, a save that gives the file back.
#![allow(dead_code)]

use super::fixture::{assert_rel, Arr};
use flaxen::dfdx::nn::tensor_collection::{RecursiveWalker, TensorVisitor, ViewTensorMut};
use flaxen::dfdx::nn::TensorOptions;
use flaxen::dfdx::tensor::HasErr;
use flaxen::interop::flax::{self, FlaxLayout, FlaxLeaves};
use flaxen::prelude::*;
use std::collections::BTreeMap;

/// A fixture of `make_flax_structured.py` or `make_flax_ports.py`: every
/// field a generator may write (absent ones are empty).
#[derive(serde::Deserialize)]
pub struct FlaxFixture {
    #[serde(default)]
    pub x: Option<Arr>,
    #[serde(default)]
    pub src: Option<Arr>,
    #[serde(default)]
    pub tgt: Option<Arr>,
    #[serde(default)]
    pub labels: Vec<usize>,
    #[serde(default)]
    pub logits: Option<Arr>,
    #[serde(default)]
    pub out: Option<Arr>,
    #[serde(default)]
    pub out_train: Option<Arr>,
    #[serde(default)]
    pub out_train_f64: Option<Arr>,
    #[serde(default)]
    pub out_policy: Option<Arr>,
    #[serde(default)]
    pub out_value: Option<Arr>,
    #[serde(default)]
    pub w: Option<Arr>,
    #[serde(default)]
    pub w_policy: Option<Arr>,
    #[serde(default)]
    pub w_value: Option<Arr>,
    #[serde(default)]
    pub grads: BTreeMap<String, Arr>,
    #[serde(default)]
    pub grads_f64: BTreeMap<String, Arr>,
    #[serde(default)]
    pub grad_src: Option<Arr>,
    #[serde(default)]
    pub grad_tgt: Option<Arr>,
    #[serde(default)]
    pub new_batch_stats: BTreeMap<String, Arr>,
    #[serde(default)]
    pub new_batch_stats_f64: BTreeMap<String, Arr>,
    /// A large kernel's gradient, on some of its rows only.
    #[serde(
        default,
        alias = "dense_0_kernel_grad_rows",
        alias = "hidden_kernel_grad_rows"
    )]
    pub kernel_grad_rows: Vec<usize>,
    #[serde(default, alias = "dense_0_kernel_grad", alias = "hidden_kernel_grad")]
    pub kernel_grad: Option<Arr>,
    pub paths: Vec<String>,
    pub num_params: usize,
}

/// Reads a fixture.
pub fn fixture(json: &str) -> FlaxFixture {
    serde_json::from_str(json).expect("fixture")
}

/// Loads `bytes`, as Flax's `to_bytes` wrote them, into `model`, after
/// checking that the model has the file's parameter count and Flax paths;
/// then checks that saving gives the file back bit for bit.
pub fn load_as_flax_wrote_it<M>(model: &mut M, bytes: &[u8], f: &FlaxFixture)
where
    M: TensorCollection<f32, Cpu> + FlaxLayout,
{
    assert_eq!(model.num_trainable_params(), f.num_params);
    assert_eq!(layout_paths::<M>(&f.paths), f.paths);
    flax::load(model, bytes).unwrap();
    assert_save_is_exact(model, bytes);
}

/// Rows `rows` of a `[_, width]` row-major matrix, one after another.
pub fn rows_of(matrix: &[f64], width: usize, rows: &[usize]) -> Vec<f64> {
    rows.iter()
        .flat_map(|r| matrix[r * width..(r + 1) * width].iter().copied())
        .collect()
}

/// A fixture array's values as f32.
pub fn f32s(a: &Arr) -> Vec<f32> {
    a.data.iter().map(|v| *v as f32).collect()
}

/// The Flax paths of a model's layout, sorted, with `/value` on the leaves
/// the file holds boxed.
pub fn layout_paths<M: FlaxLayout>(file: &[String]) -> Vec<String> {
    let mut got: Vec<String> = FlaxLeaves::of::<M>()
        .leaves()
        .iter()
        .map(|l| {
            let p = l.flax_path();
            let boxed = format!("{p}/value");
            if file.contains(&boxed) {
                boxed
            } else {
                p
            }
        })
        .collect();
    got.sort();
    got
}

/// Puts each trainable tensor's gradient in its place.
struct GradsIntoParams<'a, E: Dtype>(&'a Gradients<E, Cpu>);

impl<E: Dtype> TensorVisitor<E, Cpu> for GradsIntoParams<'_, E>
where
    Cpu: Device<E>,
{
    type Viewer = ViewTensorMut;
    type Err = <Cpu as HasErr>::Err;
    type E2 = E;
    type D2 = Cpu;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, E, Cpu>,
        t: &mut Tensor<S, E, Cpu>,
    ) -> Result<Option<Tensor<S, E, Cpu>>, Self::Err> {
        if opts.do_gradient_update {
            let g = self.0.get(&*t).as_vec();
            t.copy_from(&g);
        }
        Ok(None)
    }
}

/// `grads` of `model`'s tensors, as Flax lays them out: the gradients put
/// in a copy of the model in place of the parameters, saved by
/// `flax::save` and read back by Flax path.
pub fn flax_grads<E: Dtype, M>(model: &M, grads: &Gradients<E, Cpu>) -> BTreeMap<String, Vec<f64>>
where
    Cpu: Device<E>,
    M: TensorCollection<E, Cpu> + FlaxLayout + Clone,
{
    let mut copy = model.clone();
    M::iter_tensors(&mut RecursiveWalker {
        m: &mut copy,
        f: &mut GradsIntoParams(grads),
    })
    .unwrap();
    let bytes = flax::save(&copy).unwrap();
    flax::read_arrays(&bytes)
        .unwrap()
        .into_iter()
        .map(|(k, t)| (k, t.data))
        .collect()
}

/// Every Flax gradient in `want` against flaxen's, by Flax path (a leaf
/// boxed on either side, `kernel/value`, matches its unboxed path).
pub fn assert_grads(got: &BTreeMap<String, Vec<f64>>, want: &BTreeMap<String, Arr>, rel: f64) {
    for (path, w) in want {
        let g = got
            .get(path)
            .or_else(|| got.get(&format!("{path}/value")))
            .or_else(|| got.get(path.trim_end_matches("/value")))
            .unwrap_or_else(|| panic!("no flaxen gradient at `{path}`"));
        assert_rel(&format!("d loss / d {path}"), g, &w.data, rel, 1.0);
    }
}

/// Saving a model loaded from `bytes` gives the file's arrays bit for bit
/// (a boxed leaf comes back unboxed, as `from_bytes` into an unboxed
/// template reads it).
pub fn assert_save_is_exact<M>(model: &M, bytes: &[u8])
where
    M: TensorCollection<f32, Cpu> + FlaxLayout,
{
    let file = flax::read_arrays(bytes).unwrap();
    let saved = flax::read_arrays(&flax::save(model).unwrap()).unwrap();
    assert_eq!(file.len(), saved.len());
    for (path, t) in &file {
        let back = saved
            .get(path)
            .or_else(|| saved.get(path.trim_end_matches("/value")))
            .unwrap_or_else(|| panic!("`{path}` not saved"));
        assert_eq!(back.shape, t.shape, "{path}");
        assert_eq!(back.data, t.data, "{path}");
    }
}
