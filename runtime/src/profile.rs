//! A profiler for `#[compact]` models: where a training step's time goes,
//! layer by layer, forward and backward (what a Flax user reads from
//! `jax.profiler`).
//!
//! While a [`Profiler`] runs on a thread, every layer and op call of a
//! `#[compact]` model on that thread records a *forward span* (from just
//! before the call to just after it) and, when the call was made with a
//! gradient tape, a *backward span*: the macro puts two identity markers on
//! dfdx's tape around each call, one on the call's output whose backward op
//! records "the backward of this layer starts", one on its input whose
//! backward op records "it ends". dfdx runs backward ops in the reverse of
//! the order they were added, so the time between the two markers is that
//! of the layer's own backward ops. A layer or op with several tensor
//! inputs (a tuple, attention with a mask, `concatenate`, `x + y`) marks
//! its first tensor input: all its backward ops still run between the two
//! markers, since the order is global across merged tapes. Calls whose
//! input or output is a mask (no tape) record their forward span only.
//!
//! Each span is named by the layer's checkpoint name (`conv_0`, `dense_1`),
//! each op by its word and a per-model count in call order (`relu_0`,
//! `avg_pool_1`, `flatten_0`, `add_0` for `x + y`, `mul_0` for `x * 0.5`), and
//! the layers of a nested model by its field name and a dot
//! (`block_0.conv_0`). Calls that the model runs as one kernel (a `Conv`
//! with the `relu` and pooling that read it) are one span, named by all of
//! them joined with `+` (`conv_0+relu_0+avg_pool_0`). A nested model's
//! call is a span of its own, a *block*: it contains its layers' spans, so
//! it appears in [`ProfileReport::events`] and the Chrome trace but not
//! among the table's rows, which add up without counting any time twice.
//!
//! ```
//! use flaxen_runtime::profile::{self, Profiler};
//!
//! let profiler = Profiler::start();
//! for _ in 0..3 {
//!     let _step = profile::step_scope(); // each step a span of the trace
//!     // .. forward, loss, backward, optimizer ..
//! }
//! let report = profiler.finish();
//! assert_eq!(report.steps(), 3);
//! println!("{}", report.table());
//! ```
//!
//! The docs of the `flaxen` crate (`docs/profiling.md`) show a whole
//! training step profiled.
//!
//! # Cost
//!
//! With no profiler running in the process, a layer call costs one relaxed
//! atomic load more and records nothing. While one runs, each call costs a
//! few hundred nanoseconds (two clock reads, a name look-up, two boxed
//! marker closures on the tape), which the spans include.
//!
//! # Threads
//!
//! A profiler records the thread that started it: tests running in
//! parallel, data-loading threads and other models are not mixed in. The
//! backward pass must run on the same thread as the forward pass (as it
//! does in a training step). The CPU kernels' own worker threads are part
//! of the calls that start them.
//!
//! # Cuda
//!
//! On the CPU, kernels run while the call runs, so a span is the layer's
//! time. Cuda kernels are asynchronous: on dfdx's Cuda device a span is the
//! host-side time of launching the layer's kernels, and a layer's device
//! time shows up in the span of whichever later call waits for the device
//! (often "other", where the loss is read back). Synchronise the device in
//! the step (`dev.synchronize()`) for step totals; per-layer device times
//! need a device profiler such as Nsight Systems.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dfdx::shapes::Shape;
use dfdx::tensor::{PutTape, SplitTape, Storage, Tape, Tensor};

/// How many profilers run in the process: the one load a layer call makes
/// when it is 0.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// Distinguishes profiler runs, so that a backward marker left on a tape by
/// an earlier run records nothing in a later one.
static SESSIONS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static RECORDER: RefCell<Option<Recorder>> = const { RefCell::new(None) };
}

/// Name ids of the prefix stack's root.
const ROOT: u32 = u32::MAX;

/// What a running profiler has recorded on its thread.
struct Recorder {
    session: u64,
    origin: Instant,
    /// Full names (`block_0.conv_0`) by id, ids in order of first call.
    names: Vec<(String, bool)>,
    lookup: HashMap<(u32, &'static str), u32>,
    /// The blocks whose call is running, innermost last.
    prefix: Vec<u32>,
    forward: Vec<Raw>,
    backward: Vec<Raw>,
    /// Backward spans whose start marker has run, by call.
    pending: HashMap<u64, (u32, Instant)>,
    steps: Vec<(Instant, Instant)>,
    next_call: u64,
    paused_since: Option<Instant>,
    paused: Duration,
}

/// A recorded span (name id, start, end).
#[derive(Clone, Copy)]
struct Raw {
    name: u32,
    start: Instant,
    end: Instant,
}

impl Recorder {
    fn new(session: u64) -> Self {
        Recorder {
            session,
            origin: Instant::now(),
            names: Vec::new(),
            lookup: HashMap::new(),
            prefix: Vec::new(),
            forward: Vec::new(),
            backward: Vec::new(),
            pending: HashMap::new(),
            steps: Vec::new(),
            next_call: 0,
            paused_since: None,
            paused: Duration::ZERO,
        }
    }

    /// The id of `local` under the current prefix.
    fn intern(&mut self, local: &'static str, block: bool) -> u32 {
        let parent = self.prefix.last().copied().unwrap_or(ROOT);
        if let Some(&id) = self.lookup.get(&(parent, local)) {
            return id;
        }
        let full = match parent {
            ROOT => local.to_string(),
            p => format!("{}.{local}", self.names[p as usize].0),
        };
        let id = self.names.len() as u32;
        self.names.push((full, block));
        self.lookup.insert((parent, local), id);
        id
    }
}

/// Runs `f` on this thread's recorder if it belongs to `session` and is
/// not paused.
fn with_recorder(session: u64, f: impl FnOnce(&mut Recorder)) {
    // `try_with`: a marker may run while the thread is being torn down.
    let _ = RECORDER.try_with(|r| {
        if let Some(rec) = r.borrow_mut().as_mut() {
            if rec.session == session && rec.paused_since.is_none() {
                f(rec);
            }
        }
    });
}

/// Whether a profiler runs on this thread (and is not paused): whether a
/// layer call made now would be recorded.
///
/// ```
/// use flaxen_runtime::profile::{self, Profiler};
///
/// assert!(!profile::is_recording());
/// let p = Profiler::start();
/// assert!(profile::is_recording());
/// let _ = p.finish();
/// assert!(!profile::is_recording());
/// ```
pub fn is_recording() -> bool {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return false;
    }
    RECORDER
        .try_with(|r| {
            r.borrow()
                .as_ref()
                .is_some_and(|rec| rec.paused_since.is_none())
        })
        .unwrap_or(false)
}

/// A call being recorded: what generated code holds between
/// [`enter`] and [`exit`]. Not public API.
#[doc(hidden)]
pub struct Span {
    session: u64,
    call: u64,
    name: u32,
    start: Instant,
    block: bool,
}

impl Drop for Span {
    fn drop(&mut self) {
        // A block's prefix is popped however its call ends (an `Err`
        // returned through `?` included). Pausing does not stop this.
        if self.block {
            let _ = RECORDER.try_with(|r| {
                if let Some(rec) = r.borrow_mut().as_mut() {
                    if rec.session == self.session {
                        rec.prefix.pop();
                    }
                }
            });
        }
    }
}

/// Starts the span of a layer or op call named `name` (the generated
/// forward calls it). Not public API.
#[doc(hidden)]
#[inline]
pub fn enter(name: &'static str) -> Option<Span> {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    enter_slow(name, false)
}

/// Starts the span of a nested model's call named `name`: the names of
/// the calls inside it get `name.` as a prefix. Not public API.
#[doc(hidden)]
#[inline]
pub fn enter_block(name: &'static str) -> Option<Span> {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    enter_slow(name, true)
}

#[inline(never)]
fn enter_slow(name: &'static str, block: bool) -> Option<Span> {
    RECORDER
        .try_with(|r| {
            let mut r = r.borrow_mut();
            let rec = r.as_mut()?;
            if rec.paused_since.is_some() {
                return None;
            }
            let id = rec.intern(name, block);
            if block {
                rec.prefix.push(id);
            }
            rec.next_call += 1;
            Some(Span {
                session: rec.session,
                call: rec.next_call,
                name: id,
                start: Instant::now(),
                block,
            })
        })
        .ok()
        .flatten()
}

/// Where calls are being named: the profiler run and the innermost block.
/// Not public API.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Scope {
    session: u64,
    parent: u32,
}

/// The scope calls made now are named in, for [`reenter`]. Not public API.
#[doc(hidden)]
pub fn scope() -> Option<Scope> {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return None;
    }
    RECORDER
        .try_with(|r| {
            let r = r.borrow();
            let rec = r.as_ref().filter(|rec| rec.paused_since.is_none())?;
            Some(Scope {
                session: rec.session,
                parent: rec.prefix.last().copied().unwrap_or(ROOT),
            })
        })
        .ok()
        .flatten()
}

/// Runs `f` with its calls named as in `scope`, which [`scope`] captured
/// earlier: a remat block's recomputation, in the backward pass, records
/// its layers under the block's name (`block_0.conv_0`), as its forward
/// pass did. Not public API.
#[doc(hidden)]
pub fn reenter<R>(scope: Option<Scope>, f: impl FnOnce() -> R) -> R {
    struct Pop(Option<u64>);
    impl Drop for Pop {
        fn drop(&mut self) {
            if let Some(session) = self.0 {
                let _ = RECORDER.try_with(|r| {
                    if let Some(rec) = r.borrow_mut().as_mut() {
                        if rec.session == session {
                            rec.prefix.pop();
                        }
                    }
                });
            }
        }
    }
    let pushed = scope.filter(|s| s.parent != ROOT).and_then(|s| {
        RECORDER
            .try_with(|r| {
                let mut r = r.borrow_mut();
                let rec = r.as_mut().filter(|rec| rec.session == s.session)?;
                rec.prefix.push(s.parent);
                Some(s.session)
            })
            .ok()
            .flatten()
    });
    let _pop = Pop(pushed);
    f()
}

/// Puts the "backward ends" marker on a call's (first) input. Not public
/// API.
#[doc(hidden)]
#[inline]
pub fn mark<E, S: Shape, X: Clone, D: Storage<X> + Storage<E>, T: Tape<E, D>>(
    span: &Option<Span>,
    t: Tensor<S, X, D, T>,
) -> Tensor<S, X, D, T> {
    match span {
        Some(s) if T::OWNS_TAPE => {
            let (t, mut tape) = t.split_tape();
            add_marker::<E, D, T>(&mut tape, s, false);
            t.put_tape(tape)
        }
        _ => t,
    }
}

/// Adds a marker's backward op to `tape`: "backward starts" (`start`) or
/// "ends". Generic over the tape alone, so that a model instantiates one
/// closure type, not one per tensor shape.
fn add_marker<E, D: Storage<E>, T: Tape<E, D>>(tape: &mut T, s: &Span, start: bool) {
    let (session, call, name) = (s.session, s.call, s.name);
    tape.add_backward_op(move |_| {
        if start {
            backward_start(session, call, name);
        } else {
            backward_end(session, call);
        }
        Ok(())
    });
}

/// Ends a call's span and puts the "backward starts" marker on its output.
/// Not public API.
#[doc(hidden)]
#[inline]
pub fn exit<E, S: Shape, X: Clone, D: Storage<X> + Storage<E>, T: Tape<E, D>>(
    t: Tensor<S, X, D, T>,
    span: Option<Span>,
) -> Tensor<S, X, D, T> {
    match span {
        None => t,
        Some(s) => {
            let t = if T::OWNS_TAPE {
                let (t, mut tape) = t.split_tape();
                add_marker::<E, D, T>(&mut tape, &s, true);
                t.put_tape(tape)
            } else {
                t
            };
            forward_end(&s);
            t
        }
    }
}

/// Ends the span of a call whose output has no tape (a mask). Not public
/// API.
#[doc(hidden)]
#[inline]
pub fn exit_untaped<V>(v: V, span: Option<Span>) -> V {
    if let Some(s) = span {
        forward_end(&s);
    }
    v
}

fn forward_end(s: &Span) {
    let end = Instant::now();
    with_recorder(s.session, |rec| {
        rec.forward.push(Raw {
            name: s.name,
            start: s.start,
            end,
        })
    });
}

fn backward_start(session: u64, call: u64, name: u32) {
    let now = Instant::now();
    with_recorder(session, |rec| {
        rec.pending.insert(call, (name, now));
    });
}

fn backward_end(session: u64, call: u64) {
    let end = Instant::now();
    with_recorder(session, |rec| {
        if let Some((name, start)) = rec.pending.remove(&call) {
            rec.backward.push(Raw { name, start, end });
        }
    });
}

/// A training step's span in the trace, from [`step_scope`] to the
/// guard's drop.
///
/// ```
/// use flaxen_runtime::profile::{self, Profiler};
///
/// let p = Profiler::start();
/// {
///     let _step = profile::step_scope();
///     // .. one training step ..
/// }
/// assert_eq!(p.finish().steps(), 1);
/// ```
#[must_use = "the step ends when the guard is dropped"]
pub struct StepScope {
    started: Option<(u64, Instant)>,
}

/// Marks a training step: the returned guard records a `step` span when
/// it is dropped. Without a running profiler on this thread it records
/// nothing and costs one relaxed atomic load.
///
/// ```
/// use flaxen_runtime::profile::{self, Profiler};
///
/// let p = Profiler::start();
/// for _ in 0..2 {
///     let _step = profile::step_scope();
/// }
/// let report = p.finish();
/// assert_eq!(report.steps(), 2);
/// ```
pub fn step_scope() -> StepScope {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return StepScope { started: None };
    }
    let session = RECORDER
        .try_with(|r| {
            r.borrow()
                .as_ref()
                .filter(|rec| rec.paused_since.is_none())
                .map(|rec| rec.session)
        })
        .ok()
        .flatten();
    StepScope {
        started: session.map(|s| (s, Instant::now())),
    }
}

impl Drop for StepScope {
    fn drop(&mut self) {
        if let Some((session, start)) = self.started {
            let end = Instant::now();
            with_recorder(session, |rec| rec.steps.push((start, end)));
        }
    }
}

/// A running profiler: records the layer calls of `#[compact]` models on
/// this thread from [`Profiler::start`] to [`Profiler::finish`].
///
/// ```
/// use flaxen_runtime::profile::Profiler;
///
/// let profiler = Profiler::start();
/// // .. training steps ..
/// let report = profiler.finish();
/// assert!(report.rows().is_empty()); // no model ran
/// ```
///
/// Dropping it without `finish` stops it and discards what it recorded.
pub struct Profiler {
    session: u64,
    finished: bool,
    /// Tied to the thread whose calls it records.
    _thread: PhantomData<*const ()>,
}

impl Profiler {
    /// Starts recording this thread's layer calls.
    ///
    /// # Panics
    ///
    /// If a profiler already runs on this thread (profilers do not nest).
    ///
    /// ```
    /// let p = flaxen_runtime::profile::Profiler::start();
    /// # let _ = p.finish();
    /// ```
    pub fn start() -> Profiler {
        let session = SESSIONS.fetch_add(1, Ordering::Relaxed);
        RECORDER.with(|r| {
            let mut r = r.borrow_mut();
            assert!(
                r.is_none(),
                "a profiler already runs on this thread: finish it before starting another"
            );
            *r = Some(Recorder::new(session));
        });
        ACTIVE.fetch_add(1, Ordering::Relaxed);
        Profiler {
            session,
            finished: false,
            _thread: PhantomData,
        }
    }

    /// Stops recording until [`resume`](Self::resume): what runs meanwhile
    /// (an evaluation, a checkpoint) is neither recorded nor counted in the
    /// total time. A span that starts before the pause and ends during it
    /// is dropped.
    ///
    /// ```
    /// use flaxen_runtime::profile::Profiler;
    ///
    /// let mut p = Profiler::start();
    /// p.pause();
    /// std::thread::sleep(std::time::Duration::from_millis(20));
    /// p.resume();
    /// let report = p.finish();
    /// assert!(report.total() < std::time::Duration::from_millis(20));
    /// ```
    pub fn pause(&mut self) {
        RECORDER.with(|r| {
            if let Some(rec) = r.borrow_mut().as_mut() {
                rec.paused_since.get_or_insert_with(Instant::now);
            }
        });
    }

    /// Resumes recording after [`pause`](Self::pause); a no-op when not
    /// paused.
    ///
    /// ```
    /// use flaxen_runtime::profile::{self, Profiler};
    ///
    /// let mut p = Profiler::start();
    /// p.pause();
    /// assert!(!profile::is_recording());
    /// p.resume();
    /// assert!(profile::is_recording());
    /// # let _ = p.finish();
    /// ```
    pub fn resume(&mut self) {
        RECORDER.with(|r| {
            if let Some(rec) = r.borrow_mut().as_mut() {
                if let Some(since) = rec.paused_since.take() {
                    rec.paused += since.elapsed();
                }
            }
        });
    }

    /// Stops recording and summarises what was recorded.
    ///
    /// ```
    /// use flaxen_runtime::profile::Profiler;
    ///
    /// let report = Profiler::start().finish();
    /// assert_eq!(report.steps(), 0);
    /// ```
    pub fn finish(mut self) -> ProfileReport {
        let end = Instant::now();
        let rec = self.stop();
        match rec {
            Some(rec) => ProfileReport::build(rec, end),
            None => ProfileReport::default(),
        }
    }

    /// Takes this thread's recorder and lowers the count of profilers.
    fn stop(&mut self) -> Option<Recorder> {
        if self.finished {
            return None;
        }
        self.finished = true;
        ACTIVE.fetch_sub(1, Ordering::Relaxed);
        RECORDER
            .try_with(|r| {
                let mut r = r.borrow_mut();
                match r.as_ref() {
                    Some(rec) if rec.session == self.session => r.take(),
                    _ => None,
                }
            })
            .ok()
            .flatten()
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Profiles `f` on this thread: [`Profiler::start`], `f()`,
/// [`Profiler::finish`].
///
/// ```
/// use flaxen_runtime::profile;
///
/// let report = profile::profile(|| {
///     for _ in 0..4 {
///         let _step = profile::step_scope();
///         // .. one training step ..
///     }
/// });
/// assert_eq!(report.steps(), 4);
/// ```
///
/// # Panics
///
/// If a profiler already runs on this thread.
pub fn profile(f: impl FnOnce()) -> ProfileReport {
    let p = Profiler::start();
    f();
    p.finish()
}

/// What a span measures.
///
/// ```
/// use flaxen_runtime::profile::Category;
///
/// assert_eq!(Category::Backward.as_str(), "backward");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// A call's forward computation.
    Forward,
    /// A call's backward ops, between its two tape markers.
    Backward,
    /// A training step ([`step_scope`]).
    Step,
}

impl Category {
    /// `"forward"`, `"backward"` or `"step"`: the `cat` of the Chrome
    /// trace.
    ///
    /// ```
    /// assert_eq!(flaxen_runtime::profile::Category::Step.as_str(), "step");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Forward => "forward",
            Category::Backward => "backward",
            Category::Step => "step",
        }
    }
}

/// One recorded span.
///
/// ```
/// use flaxen_runtime::profile::{self, Category, Profiler};
///
/// let p = Profiler::start();
/// drop(profile::step_scope());
/// let report = p.finish();
/// let e = &report.events()[0];
/// assert_eq!((e.category, e.name.as_str()), (Category::Step, "step 0"));
/// assert!(e.start + e.duration <= report.elapsed());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The call's name (`conv_0`, `block_0.relu_0`), or `step N`.
    pub name: String,
    /// What the span measures.
    pub category: Category,
    /// A nested model's call, which contains the spans of its layers.
    pub block: bool,
    /// When it started, from the profiler's start (pauses included).
    pub start: Duration,
    /// How long it took.
    pub duration: Duration,
}

impl Event {
    /// When it ended, from the profiler's start.
    ///
    /// ```
    /// use flaxen_runtime::profile::{Category, Event};
    /// use std::time::Duration;
    ///
    /// let e = Event {
    ///     name: "conv_0".into(),
    ///     category: Category::Forward,
    ///     block: false,
    ///     start: Duration::from_millis(2),
    ///     duration: Duration::from_millis(3),
    /// };
    /// assert_eq!(e.end(), Duration::from_millis(5));
    /// ```
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }
}

/// The totals of one layer or op (a row of [`ProfileReport::table`]).
///
/// ```
/// use flaxen_runtime::profile::ProfileRow;
/// use std::time::Duration;
///
/// let row = ProfileRow {
///     name: "conv_0".into(),
///     forward_calls: 2,
///     backward_calls: 2,
///     forward: Duration::from_millis(4),
///     backward: Duration::from_millis(6),
/// };
/// assert_eq!(row.total(), Duration::from_millis(10));
/// assert_eq!(row.forward_mean(), Duration::from_millis(2));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileRow {
    /// The call's name: a layer's checkpoint name (`conv_0`), an op's word
    /// and count (`relu_1`), prefixed by nested models' (`block_0.conv_0`).
    pub name: String,
    /// Forward calls recorded.
    pub forward_calls: usize,
    /// Backward spans recorded (calls made with a tape whose backward ran).
    pub backward_calls: usize,
    /// Total forward time.
    pub forward: Duration,
    /// Total backward time.
    pub backward: Duration,
}

impl ProfileRow {
    /// Forward plus backward time.
    ///
    /// ```
    /// let row = flaxen_runtime::profile::ProfileRow::default();
    /// assert_eq!(row.total(), std::time::Duration::ZERO);
    /// ```
    pub fn total(&self) -> Duration {
        self.forward + self.backward
    }

    /// Mean forward time per call (zero without calls).
    ///
    /// ```
    /// let row = flaxen_runtime::profile::ProfileRow::default();
    /// assert_eq!(row.forward_mean(), std::time::Duration::ZERO);
    /// ```
    pub fn forward_mean(&self) -> Duration {
        mean(self.forward, self.forward_calls)
    }

    /// Mean backward time per backward span (zero without any).
    ///
    /// ```
    /// use flaxen_runtime::profile::ProfileRow;
    /// use std::time::Duration;
    ///
    /// let row = ProfileRow { backward_calls: 4, backward: Duration::from_millis(8), ..Default::default() };
    /// assert_eq!(row.backward_mean(), Duration::from_millis(2));
    /// ```
    pub fn backward_mean(&self) -> Duration {
        mean(self.backward, self.backward_calls)
    }
}

fn mean(d: Duration, n: usize) -> Duration {
    if n == 0 {
        Duration::ZERO
    } else {
        d / n as u32
    }
}

/// What a [`Profiler`] recorded: per-layer totals, the wall time, the time
/// outside every layer ("other": loss, optimizer, data), and every span.
///
/// ```
/// use flaxen_runtime::profile;
///
/// let report = profile::profile(|| {});
/// assert_eq!(report.other(), report.total()); // nothing inside a layer
/// assert!(report.table().contains("other"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ProfileReport {
    rows: Vec<ProfileRow>,
    events: Vec<Event>,
    total: Duration,
    elapsed: Duration,
    other: Duration,
    steps: usize,
}

impl ProfileReport {
    fn build(rec: Recorder, end: Instant) -> Self {
        let paused = rec.paused
            + rec
                .paused_since
                .map_or(Duration::ZERO, |since| end.saturating_duration_since(since));
        let elapsed = end.saturating_duration_since(rec.origin);
        let total = elapsed.saturating_sub(paused);
        let at = |t: Instant| t.saturating_duration_since(rec.origin);
        let mut rows: Vec<Option<ProfileRow>> = vec![None; rec.names.len()];
        let mut leaves = Vec::new();
        let mut events = Vec::new();
        for (raws, category) in [
            (&rec.forward, Category::Forward),
            (&rec.backward, Category::Backward),
        ] {
            for r in raws {
                let (name, block) = &rec.names[r.name as usize];
                let duration = r.end.saturating_duration_since(r.start);
                events.push(Event {
                    name: name.clone(),
                    category,
                    block: *block,
                    start: at(r.start),
                    duration,
                });
                if *block {
                    continue;
                }
                leaves.push((at(r.start), at(r.end)));
                let row = rows[r.name as usize].get_or_insert_with(|| ProfileRow {
                    name: name.clone(),
                    ..Default::default()
                });
                if category == Category::Forward {
                    row.forward_calls += 1;
                    row.forward += duration;
                } else {
                    row.backward_calls += 1;
                    row.backward += duration;
                }
            }
        }
        for (k, (start, end)) in rec.steps.iter().enumerate() {
            events.push(Event {
                name: format!("step {k}"),
                category: Category::Step,
                block: false,
                start: at(*start),
                duration: end.saturating_duration_since(*start),
            });
        }
        // Parents before children: by start, then longest first.
        events.sort_by(|a, b| a.start.cmp(&b.start).then(b.duration.cmp(&a.duration)));
        let inside = union_length(leaves);
        ProfileReport {
            rows: rows.into_iter().flatten().collect(),
            events,
            total,
            elapsed,
            other: total.saturating_sub(inside),
            steps: rec.steps.len(),
        }
    }

    /// One row per layer or op call site, in the order of their first
    /// calls (nested models' calls are not rows: their layers are).
    ///
    /// ```
    /// let report = flaxen_runtime::profile::profile(|| {});
    /// assert!(report.rows().is_empty());
    /// ```
    pub fn rows(&self) -> &[ProfileRow] {
        &self.rows
    }

    /// The row named `name` (`"conv_0"`, `"block_0.relu_0"`).
    ///
    /// ```
    /// let report = flaxen_runtime::profile::profile(|| {});
    /// assert!(report.row("conv_0").is_none());
    /// ```
    pub fn row(&self, name: &str) -> Option<&ProfileRow> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// Every span (forward, backward, nested models' calls, steps) ordered
    /// by start, an enclosing span before the spans it contains.
    ///
    /// ```
    /// let report = flaxen_runtime::profile::profile(|| {});
    /// assert!(report.events().is_empty());
    /// ```
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The wall time of the profiled region, pauses excluded.
    ///
    /// ```
    /// let report = flaxen_runtime::profile::profile(|| {});
    /// assert!(report.total() <= report.elapsed());
    /// ```
    pub fn total(&self) -> Duration {
        self.total
    }

    /// The wall time from start to finish, pauses included (the trace's
    /// time axis).
    ///
    /// ```
    /// let report = flaxen_runtime::profile::profile(|| {});
    /// assert!(report.elapsed() >= report.total());
    /// ```
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// The time inside no layer or op span: loss, optimizer, data, and the
    /// model's code between its calls. The rows' totals and this add up to
    /// [`total`](Self::total).
    ///
    /// ```
    /// let report = flaxen_runtime::profile::profile(|| {});
    /// assert_eq!(report.other(), report.total());
    /// ```
    pub fn other(&self) -> Duration {
        self.other
    }

    /// How many [`step_scope`]s were recorded.
    ///
    /// ```
    /// let report = flaxen_runtime::profile::profile(|| {});
    /// assert_eq!(report.steps(), 0);
    /// ```
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// `d`'s share of the total time, in percent.
    ///
    /// ```
    /// let report = flaxen_runtime::profile::profile(|| {});
    /// assert_eq!(report.share(report.total()).round(), if report.total().is_zero() { 0.0 } else { 100.0 });
    /// ```
    pub fn share(&self, d: Duration) -> f64 {
        let t = self.total.as_secs_f64();
        if t > 0.0 {
            100.0 * d.as_secs_f64() / t
        } else {
            0.0
        }
    }

    /// The rows as an aligned text table in call order, with "other" and
    /// the total; times in milliseconds, `share` of the total wall time.
    /// `calls` is `forward/backward` where they differ.
    ///
    /// ```
    /// let report = flaxen_runtime::profile::profile(|| {});
    /// let table = report.table();
    /// assert!(table.lines().any(|l| l.starts_with("total")));
    /// ```
    pub fn table(&self) -> String {
        let ms = |d: Duration| format!("{:.3}", d.as_secs_f64() * 1e3);
        let mut lines: Vec<[String; 8]> = vec![[
            "layer".into(),
            "calls".into(),
            "fwd ms".into(),
            "fwd mean".into(),
            "bwd ms".into(),
            "bwd mean".into(),
            "total ms".into(),
            "share".into(),
        ]];
        for r in &self.rows {
            let calls = if r.forward_calls == r.backward_calls {
                r.forward_calls.to_string()
            } else {
                format!("{}/{}", r.forward_calls, r.backward_calls)
            };
            let (bwd, bwd_mean) = if r.backward_calls == 0 {
                ("-".to_string(), "-".to_string())
            } else {
                (ms(r.backward), ms(r.backward_mean()))
            };
            lines.push([
                r.name.clone(),
                calls,
                ms(r.forward),
                ms(r.forward_mean()),
                bwd,
                bwd_mean,
                ms(r.total()),
                format!("{:.1}%", self.share(r.total())),
            ]);
        }
        let blank = || String::new();
        let short = |name: &str, d: Duration| {
            [
                name.to_string(),
                blank(),
                blank(),
                blank(),
                blank(),
                blank(),
                ms(d),
                format!("{:.1}%", self.share(d)),
            ]
        };
        lines.push(short("other", self.other));
        lines.push(short("total", self.total));
        let mut width = [0usize; 8];
        for l in &lines {
            for (w, c) in width.iter_mut().zip(l) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let rule = width.iter().sum::<usize>() + 2 * (width.len() - 1);
        for (k, l) in lines.iter().enumerate() {
            if k == 1 || k == lines.len() - 2 {
                let _ = writeln!(out, "{}", "-".repeat(rule));
            }
            let mut line = format!("{:<w$}", l[0], w = width[0]);
            for (c, w) in l.iter().zip(width).skip(1) {
                let _ = write!(line, "  {c:>w$}");
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        if self.steps > 0 {
            let per = self.total / self.steps as u32;
            let _ = writeln!(out, "{} steps, {} ms per step", self.steps, ms(per));
        }
        out
    }

    /// The spans as a Chrome trace (JSON, microseconds), which Perfetto
    /// (`ui.perfetto.dev`) and `chrome://tracing` open: one complete event
    /// (`"ph": "X"`) per span, `cat` being `forward`, `backward` or
    /// `step`.
    ///
    /// ```
    /// use flaxen_runtime::profile::{self, Profiler};
    ///
    /// let p = Profiler::start();
    /// drop(profile::step_scope());
    /// let trace: serde_json::Value = serde_json::from_str(&p.finish().chrome_trace()).unwrap();
    /// assert_eq!(trace["traceEvents"][0]["cat"], "step");
    /// ```
    pub fn chrome_trace(&self) -> String {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let events: Vec<serde_json::Value> = self
            .events
            .iter()
            .map(|e| {
                serde_json::json!({
                    "name": e.name,
                    "cat": e.category.as_str(),
                    "ph": "X",
                    "ts": us(e.start),
                    "dur": us(e.duration),
                    "pid": 1,
                    "tid": 1,
                })
            })
            .collect();
        serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" }).to_string()
    }

    /// Writes [`chrome_trace`](Self::chrome_trace) to `path`.
    ///
    /// ```
    /// let report = flaxen_runtime::profile::profile(|| {});
    /// let path = std::env::temp_dir().join("flaxen-doc-profile.trace.json");
    /// report.write_chrome_trace(&path).unwrap();
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn write_chrome_trace(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.chrome_trace())
    }
}

impl std::fmt::Display for ProfileReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.table())
    }
}

/// The length of the union of intervals.
fn union_length(mut spans: Vec<(Duration, Duration)>) -> Duration {
    spans.sort();
    let mut total = Duration::ZERO;
    let mut current: Option<(Duration, Duration)> = None;
    for (s, e) in spans {
        match &mut current {
            Some((_, ce)) if s <= *ce => *ce = (*ce).max(e),
            _ => {
                if let Some((cs, ce)) = current.take() {
                    total += ce - cs;
                }
                current = Some((s, e));
            }
        }
    }
    if let Some((cs, ce)) = current {
        total += ce - cs;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_merges_overlaps() {
        let ms = Duration::from_millis;
        assert_eq!(
            union_length(vec![
                (ms(5), ms(7)),
                (ms(0), ms(2)),
                (ms(1), ms(3)),
                (ms(7), ms(8))
            ]),
            ms(6)
        );
        assert_eq!(union_length(Vec::new()), Duration::ZERO);
    }
}
