//! Learning-rate schedules, numerically equal to Optax's.
//!
//! A schedule maps the optimizer's step count (0 for the first update) to a
//! value. It is evaluated on the host: the count is host state, so this costs
//! no device sync. A plain `f64`/`f32` is a constant schedule, so every
//! learning rate argument accepts either.
//!
//! The decaying schedules compute in `f32`, as Optax does under JAX's default
//! precision: near the end of a cosine decay `1 + cos(x)` cancels, and only
//! the same arithmetic gives the same numbers.
//!
//! ```
//! use flaxen_runtime::schedule::*;
//!
//! let s = warmup_cosine_decay(0.0, 1e-3, 10, 100, 1e-5);
//! assert_eq!(s.value(0), 0.0);
//! assert!((s.value(10) - 1e-3).abs() < 1e-6);
//! assert_eq!(1e-3.value(7), 1e-3);
//! ```

use std::f32::consts::PI;

/// A function from the step count to a value (usually a learning rate).
///
/// ```
/// use flaxen_runtime::schedule::Schedule;
///
/// /// Halves the rate every 100 steps.
/// #[derive(Debug, Clone)]
/// struct Halving(f64);
/// impl Schedule for Halving {
///     fn value(&self, step: u64) -> f64 {
///         self.0 * 0.5f64.powi((step / 100) as i32)
///     }
/// }
/// assert_eq!(Halving(1.0).value(250), 0.25);
/// ```
pub trait Schedule: Clone + std::fmt::Debug {
    /// The value at `step` (0-based).
    fn value(&self, step: u64) -> f64;
}

impl Schedule for f64 {
    fn value(&self, _step: u64) -> f64 {
        *self
    }
}

impl Schedule for f32 {
    fn value(&self, _step: u64) -> f64 {
        *self as f64
    }
}

/// A constant schedule (Optax `constant_schedule`).
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// assert_eq!(constant(0.1).value(1000), 0.1);
/// ```
pub fn constant(value: f64) -> Constant {
    Constant(value)
}

/// See [`constant`].
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// assert_eq!(Constant(0.5).value(3), 0.5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Constant(pub f64);

impl Schedule for Constant {
    fn value(&self, _step: u64) -> f64 {
        self.0
    }
}

/// Cosine decay from `init_value` to `alpha * init_value` over `decay_steps`,
/// then constant (Optax `cosine_decay_schedule`, `exponent = 1`).
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// let s = cosine_decay(1e-3, 100, 0.0);
/// assert!((s.value(50) - 5e-4).abs() < 1e-6);
/// assert_eq!(s.value(500), 0.0);
/// ```
pub fn cosine_decay(init_value: f64, decay_steps: u64, alpha: f64) -> CosineDecay {
    CosineDecay {
        init_value,
        decay_steps,
        alpha,
        exponent: 1.0,
    }
}

/// See [`cosine_decay`].
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// let s: CosineDecay = cosine_decay(1.0, 10, 0.5);
/// assert_eq!(s.value(10), 0.5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CosineDecay {
    init_value: f64,
    decay_steps: u64,
    alpha: f64,
    exponent: f64,
}

impl CosineDecay {
    /// Raises the cosine factor to `exponent` (Optax's `exponent` argument).
    ///
    /// ```
    /// # use flaxen_runtime::schedule::*;
    /// let s = cosine_decay(1.0, 10, 0.0).exponent(2.0);
    /// assert!((s.value(5) - 0.25).abs() < 1e-6);
    /// ```
    pub fn exponent(mut self, exponent: f64) -> Self {
        self.exponent = exponent;
        self
    }
}

impl Schedule for CosineDecay {
    fn value(&self, step: u64) -> f64 {
        if self.decay_steps == 0 {
            return self.init_value;
        }
        let count = step.min(self.decay_steps) as f32;
        let cosine = 0.5 * (1.0 + (PI * count / self.decay_steps as f32).cos());
        let alpha = self.alpha as f32;
        let decayed = (1.0 - alpha) * cosine.powf(self.exponent as f32) + alpha;
        (self.init_value as f32 * decayed) as f64
    }
}

/// Linear warmup from `init_value` to `peak_value` over `warmup_steps`, then
/// cosine decay to `end_value` at `decay_steps` (counted from step 0, as in
/// Optax `warmup_cosine_decay_schedule`).
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// let s = warmup_cosine_decay(0.0, 1.0, 10, 110, 0.0);
/// assert!((s.value(5) - 0.5).abs() < 1e-6);
/// assert!((s.value(60) - 0.5).abs() < 1e-6);
/// ```
pub fn warmup_cosine_decay(
    init_value: f64,
    peak_value: f64,
    warmup_steps: u64,
    decay_steps: u64,
    end_value: f64,
) -> WarmupCosineDecay {
    let alpha = if peak_value == 0.0 {
        0.0
    } else {
        end_value / peak_value
    };
    WarmupCosineDecay {
        warmup: linear(init_value, peak_value, warmup_steps),
        decay: cosine_decay(peak_value, decay_steps.saturating_sub(warmup_steps), alpha),
        warmup_steps,
    }
}

/// See [`warmup_cosine_decay`].
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// let s: WarmupCosineDecay = warmup_cosine_decay(0.0, 1.0, 2, 10, 0.0);
/// assert_eq!(s.value(1), 0.5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmupCosineDecay {
    warmup: Linear,
    decay: CosineDecay,
    warmup_steps: u64,
}

impl Schedule for WarmupCosineDecay {
    fn value(&self, step: u64) -> f64 {
        // Optax's join_schedules: the second schedule restarts its count at
        // the boundary.
        if step < self.warmup_steps {
            self.warmup.value(step)
        } else {
            self.decay.value(step - self.warmup_steps)
        }
    }
}

/// `init_value * decay_rate^(step / transition_steps)`, with the exponent
/// floored when `staircase` (Optax `exponential_decay`). Builder methods add
/// Optax's `transition_begin` and `end_value`.
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// let s = exponential_decay(1e-2, 10, 0.5, true);
/// assert!((s.value(9) - 1e-2).abs() < 1e-9);
/// assert!((s.value(10) - 5e-3).abs() < 1e-9);
/// let s = exponential_decay(1.0, 1, 0.5, false).end_value(0.3);
/// assert_eq!(s.value(5), 0.3);
/// ```
pub fn exponential_decay(
    init_value: f64,
    transition_steps: u64,
    decay_rate: f64,
    staircase: bool,
) -> ExponentialDecay {
    ExponentialDecay {
        init_value,
        transition_steps,
        decay_rate,
        staircase,
        transition_begin: 0,
        end_value: None,
    }
}

/// See [`exponential_decay`].
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// let s: ExponentialDecay = exponential_decay(1.0, 1, 0.5, true);
/// assert_eq!(s.value(2), 0.25);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExponentialDecay {
    init_value: f64,
    transition_steps: u64,
    decay_rate: f64,
    staircase: bool,
    transition_begin: u64,
    end_value: Option<f64>,
}

impl ExponentialDecay {
    /// Holds `init_value` for the first `steps` steps.
    ///
    /// ```
    /// # use flaxen_runtime::schedule::*;
    /// let s = exponential_decay(1.0, 1, 0.5, false).transition_begin(3);
    /// assert_eq!((s.value(3), s.value(4)), (1.0, 0.5));
    /// ```
    pub fn transition_begin(mut self, steps: u64) -> Self {
        self.transition_begin = steps;
        self
    }

    /// Bounds the value by `end_value` (a floor when decaying, a ceiling when
    /// growing).
    ///
    /// ```
    /// # use flaxen_runtime::schedule::*;
    /// let s = exponential_decay(1.0, 1, 2.0, false).end_value(3.0);
    /// assert_eq!(s.value(10), 3.0);
    /// ```
    pub fn end_value(mut self, end_value: f64) -> Self {
        self.end_value = Some(end_value);
        self
    }
}

impl Schedule for ExponentialDecay {
    fn value(&self, step: u64) -> f64 {
        if self.transition_steps == 0 {
            return self.init_value;
        }
        let count = step as f64 - self.transition_begin as f64;
        if count <= 0.0 {
            return self.init_value;
        }
        let mut p = count as f32 / self.transition_steps as f32;
        if self.staircase {
            p = p.floor();
        }
        let v = (self.init_value as f32 * (self.decay_rate as f32).powf(p)) as f64;
        match self.end_value {
            Some(end) if self.decay_rate < 1.0 => v.max(end),
            Some(end) => v.min(end),
            None => v,
        }
    }
}

/// Linear interpolation from `init_value` to `end_value` over
/// `transition_steps`, then constant (Optax `linear_schedule`).
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// let s = linear(1.0, 0.0, 4);
/// assert_eq!([s.value(0), s.value(1), s.value(4), s.value(9)], [1.0, 0.75, 0.0, 0.0]);
/// ```
pub fn linear(init_value: f64, end_value: f64, transition_steps: u64) -> Linear {
    Linear {
        init_value,
        end_value,
        transition_steps,
        transition_begin: 0,
    }
}

/// See [`linear`].
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// let s: Linear = linear(0.0, 1.0, 4);
/// assert_eq!(s.value(2), 0.5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Linear {
    init_value: f64,
    end_value: f64,
    transition_steps: u64,
    transition_begin: u64,
}

impl Linear {
    /// Holds `init_value` for the first `steps` steps.
    ///
    /// ```
    /// # use flaxen_runtime::schedule::*;
    /// let s = linear(1.0, 0.0, 2).transition_begin(5);
    /// assert_eq!([s.value(5), s.value(6)], [1.0, 0.5]);
    /// ```
    pub fn transition_begin(mut self, steps: u64) -> Self {
        self.transition_begin = steps;
        self
    }
}

impl Schedule for Linear {
    fn value(&self, step: u64) -> f64 {
        if self.transition_steps == 0 {
            return self.init_value;
        }
        let count = step
            .saturating_sub(self.transition_begin)
            .min(self.transition_steps);
        let frac = 1.0 - count as f32 / self.transition_steps as f32;
        let (init, end) = (self.init_value as f32, self.end_value as f32);
        ((init - end) * frac + end) as f64
    }
}

/// `init_value` multiplied by every `scale` whose `boundary` has been reached
/// (`step >= boundary`), as in Optax `piecewise_constant_schedule`.
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// let s = piecewise_constant(0.1, &[(30, 0.1), (60, 0.1)]);
/// assert_eq!(s.value(29), 0.1);
/// assert!((s.value(30) - 0.01).abs() < 1e-15);
/// assert!((s.value(60) - 0.001).abs() < 1e-15);
/// ```
pub fn piecewise_constant(
    init_value: f64,
    boundaries_and_scales: &[(u64, f64)],
) -> PiecewiseConstant {
    let mut bounds = boundaries_and_scales.to_vec();
    bounds.sort_by_key(|&(b, _)| b);
    PiecewiseConstant { init_value, bounds }
}

/// See [`piecewise_constant`].
///
/// ```
/// # use flaxen_runtime::schedule::*;
/// let s: PiecewiseConstant = piecewise_constant(1.0, &[(5, 0.5)]);
/// assert_eq!(s.value(5), 0.5);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PiecewiseConstant {
    init_value: f64,
    bounds: Vec<(u64, f64)>,
}

impl Schedule for PiecewiseConstant {
    fn value(&self, step: u64) -> f64 {
        self.bounds
            .iter()
            .filter(|&&(b, _)| step >= b)
            .fold(self.init_value, |v, &(_, s)| v * s)
    }
}
