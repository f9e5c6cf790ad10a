//! Loading a checkpoint into several live objects, all or nothing.

use std::collections::BTreeSet;
use std::marker::PhantomData;

use crate::dfdx::nn::tensor_collection::TensorCollection;
use crate::dfdx::prelude::{Device, Dtype as DfdxDtype};
use crate::state::{StateDict, StateError, StateMap};

use super::{
    load_module_state, prefix_of, save_module_state, Checkpoint, CheckpointError, Element,
};

/// One object to restore, with its dtype erased so parts of different dtypes
/// (f32 parameters, u64 data order) can be listed together.
trait Part {
    /// Decodes and checks everything; touches nothing.
    fn prepare(&mut self, ckpt: &Checkpoint) -> Result<(), CheckpointError>;
    /// Loads the prepared state.
    fn commit(&mut self, ckpt: &Checkpoint) -> Result<(), CheckpointError>;
    /// Puts back the state the object had before `commit`.
    fn rollback(&mut self);
    /// Adds the keys the object saves now (after `commit`: what it took).
    fn saved_keys(&self, out: &mut BTreeSet<String>);
}

struct Typed<E, T> {
    name: String,
    target: T,
    decoded: StateMap<E>,
    snapshot: StateMap<E>,
    /// The counters stored in the file (U64), and the object's own.
    counters: StateMap<u64>,
    snapshot_counters: StateMap<u64>,
}

impl<E, T> Typed<E, T> {
    fn new(name: &str, target: T) -> Self {
        Self {
            name: name.to_string(),
            target,
            decoded: StateMap::new(),
            snapshot: StateMap::new(),
            counters: StateMap::new(),
            snapshot_counters: StateMap::new(),
        }
    }
}

/// The counter a part's `step` key holds must be the file's own `step`.
const STEP_COUNTER: &str = "step";

impl<E: Element, T: StateDict<E>> Part for Typed<E, T> {
    fn prepare(&mut self, ckpt: &Checkpoint) -> Result<(), CheckpointError> {
        let prefix = prefix_of(&self.name);
        self.snapshot_counters.clear();
        self.target
            .save_counters(&prefix, &mut self.snapshot_counters);
        self.decoded = ckpt.part_except::<E>(&self.name, &self.snapshot_counters)?;
        // Counters are exact U64 scalars in the file; `load_state` sees 0
        // in their place and `load_counters` then sets them.
        self.counters.clear();
        let zero = E::read_le(&[0u8; 16]);
        for key in self.snapshot_counters.keys() {
            let stored = ckpt
                .tensor::<u64>(key)
                .ok_or_else(|| ckpt.mismatch(StateError::Missing { key: key.clone() }))??;
            if !stored.shape.is_empty() {
                return Err(ckpt.mismatch(StateError::Shape {
                    key: key.clone(),
                    expected: vec![],
                    found: stored.shape.clone(),
                }));
            }
            if *key == format!("{prefix}{STEP_COUNTER}") && stored.data[0] != ckpt.step() {
                return Err(ckpt.mismatch(StateError::Invalid {
                    key: key.clone(),
                    reason: format!(
                        "is {}, but the checkpoint's `step` is {}: the file is inconsistent",
                        stored.data[0],
                        ckpt.step()
                    ),
                }));
            }
            let placeholder = crate::state::HostTensor {
                shape: vec![],
                data: vec![zero],
            };
            self.decoded.insert(key.clone(), placeholder);
            self.counters.insert(key.clone(), stored);
        }
        self.snapshot.clear();
        self.target.save_state(&prefix, &mut self.snapshot);
        // Every tensor the object has now must be stored with the same shape;
        // anything more is for the object's own `load_state` to judge (an
        // optimizer may allocate its moments lazily).
        for (key, live) in &self.snapshot {
            let stored = self.decoded.get(key).ok_or_else(|| {
                ckpt.dtype_error::<E>(key)
                    .unwrap_or_else(|| ckpt.mismatch(StateError::Missing { key: key.clone() }))
            })?;
            if stored.shape != live.shape {
                return Err(ckpt.mismatch(StateError::Shape {
                    key: key.clone(),
                    expected: live.shape.clone(),
                    found: stored.shape.clone(),
                }));
            }
        }
        Ok(())
    }

    fn commit(&mut self, ckpt: &Checkpoint) -> Result<(), CheckpointError> {
        let prefix = prefix_of(&self.name);
        self.target
            .load_state(&prefix, &self.decoded)
            .map_err(|e| ckpt.mismatch(e))?;
        if let Err(e) = self.target.load_counters(&prefix, &self.counters) {
            self.rollback();
            return Err(ckpt.mismatch(e));
        }
        Ok(())
    }

    fn rollback(&mut self) {
        let prefix = prefix_of(&self.name);
        // The object's own saved state always loads back.
        let _ = self.target.load_state(&prefix, &self.snapshot);
        let _ = self.target.load_counters(&prefix, &self.snapshot_counters);
    }

    fn saved_keys(&self, out: &mut BTreeSet<String>) {
        let prefix = prefix_of(&self.name);
        let mut now = StateMap::<E>::new();
        self.target.save_state(&prefix, &mut now);
        out.extend(now.into_keys());
        let mut counters = StateMap::<u64>::new();
        self.target.save_counters(&prefix, &mut counters);
        out.extend(counters.into_keys());
    }
}

/// `&mut S` as an owned [`StateDict`].
struct ByRef<'a, S: ?Sized>(&'a mut S);

impl<E, S: StateDict<E> + ?Sized> StateDict<E> for ByRef<'_, S> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        self.0.save_state(prefix, out)
    }
    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        self.0.load_state(prefix, src)
    }
    fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
        self.0.save_counters(prefix, out)
    }
    fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
        self.0.load_counters(prefix, src)
    }
}

/// A dfdx module as a [`StateDict`].
struct ModuleRef<'a, M, D>(&'a mut M, PhantomData<D>);

impl<E, D, M> StateDict<E> for ModuleRef<'_, M, D>
where
    E: DfdxDtype,
    D: Device<E>,
    M: TensorCollection<E, D>,
{
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_module_state(&*self.0, prefix, out)
    }
    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        load_module_state(self.0, prefix, src)
    }
}

/// Loads a [`Checkpoint`] into several objects at once, all or nothing:
/// [`Restore::apply`] first decodes and checks every part (dtypes, every
/// tensor present, same shapes), and only then loads them; if a load still
/// fails, the parts already loaded are put back. After loading, every
/// tensor of the file must have been taken by some object: a tensor that
/// none of them has (another architecture, another optimizer, a part not
/// listed) is an error naming it, and everything is put back. A part's
/// counters are read from their exact U64 entries, and a part's `step`
/// counter (a `TrainState`'s) must equal the file's `step`. On `Err` every
/// object is exactly as it was.
///
/// ```
/// use flaxen_runtime::checkpoint::Checkpoint;
/// use flaxen_runtime::dfdx::prelude::*;
///
/// let dev = Cpu::default();
/// let a = dev.build_module::<Linear<2, 3>, f32>();
/// let mut ckpt = Checkpoint::new(42);
/// ckpt.add_module("params", &a).unwrap();
///
/// let mut b = dev.build_module::<Linear<2, 3>, f32>();
/// let step = ckpt.restore().module("params", &mut b).apply().unwrap();
/// assert_eq!((step, a.weight.array()), (42, b.weight.array()));
///
/// // Another architecture: an error naming the tensor and both shapes.
/// let mut c = dev.build_module::<Linear<2, 4>, f32>();
/// let err = ckpt.restore().module("params", &mut c).apply().unwrap_err();
/// assert!(err.to_string().contains("params.bias` has shape [3]"));
/// ```
pub struct Restore<'a> {
    ckpt: &'a Checkpoint,
    parts: Vec<Box<dyn Part + 'a>>,
    skipped: Vec<String>,
}

impl<'a> Restore<'a> {
    pub(crate) fn new(ckpt: &'a Checkpoint) -> Self {
        Self {
            ckpt,
            parts: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Leaves the tensors under `name.` in the file unused on purpose (e.g.
    /// an evaluation that restores only the parameters of a training
    /// checkpoint); without it they would be refused as foreign.
    ///
    /// ```
    /// use flaxen_runtime::checkpoint::Checkpoint;
    /// use flaxen_runtime::dfdx::prelude::*;
    ///
    /// let dev = Cpu::default();
    /// let (a, b) = (dev.build_module::<Linear<2, 3>, f32>(), dev.build_module::<Linear<3, 1>, f32>());
    /// let mut ckpt = Checkpoint::new(1);
    /// ckpt.add_module("params", &a).unwrap().add_module("head", &b).unwrap();
    ///
    /// let mut a2 = dev.build_module::<Linear<2, 3>, f32>();
    /// let err = ckpt.restore().module("params", &mut a2).apply().unwrap_err();
    /// assert!(err.to_string().contains("`head.bias`: is in the checkpoint, but none"));
    /// ckpt.restore().module("params", &mut a2).skip("head").apply().unwrap();
    /// ```
    pub fn skip(mut self, name: &str) -> Self {
        self.skipped.push(prefix_of(name));
        self
    }

    /// Loads the tensors under `name.` into `target`.
    pub fn part<E: Element, S: StateDict<E> + ?Sized>(
        mut self,
        name: &str,
        target: &'a mut S,
    ) -> Self {
        self.parts
            .push(Box::new(Typed::<E, _>::new(name, ByRef(target))));
        self
    }

    /// Loads the tensors under `name.` into a dfdx module, by dfdx path.
    pub fn module<E, D, M>(mut self, name: &str, module: &'a mut M) -> Self
    where
        E: Element + DfdxDtype,
        D: Device<E> + 'a,
        M: TensorCollection<E, D>,
    {
        self.parts.push(Box::new(Typed::<E, _>::new(
            name,
            ModuleRef(module, PhantomData::<D>),
        )));
        self
    }

    /// Checks every part, then loads every part; returns the checkpoint's step.
    pub fn apply(mut self) -> Result<u64, CheckpointError> {
        for part in &mut self.parts {
            part.prepare(self.ckpt)?;
        }
        for i in 0..self.parts.len() {
            if let Err(e) = self.parts[i].commit(self.ckpt) {
                for done in self.parts[..i].iter_mut().rev() {
                    done.rollback();
                }
                return Err(e);
            }
        }
        // Only now: an optimizer may create its moments while loading, so
        // what an object takes is known only once it has loaded.
        let mut taken = BTreeSet::new();
        for part in &self.parts {
            part.saved_keys(&mut taken);
        }
        let skipped = |k: &str| self.skipped.iter().any(|p| k.starts_with(p.as_str()));
        if let Some(extra) = self
            .ckpt
            .keys()
            .find(|k| !taken.contains(*k) && !skipped(k))
        {
            let err = self.ckpt.mismatch(StateError::Invalid {
                key: extra.to_string(),
                reason: "is in the checkpoint, but none of the objects restored has it \
                         (another architecture or optimizer, or a part not restored?)"
                    .into(),
            });
            for done in self.parts.iter_mut().rev() {
                done.rollback();
            }
            return Err(err);
        }
        Ok(self.ckpt.step())
    }
}
