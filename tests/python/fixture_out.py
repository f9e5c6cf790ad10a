"""What the fixture generators share: their seeded float32 draws, the
perturbed Flax checkpoints they save, where and how they write a fixture,
and the float64 rerun of those whose JSON holds float64 results, with the
comparisons it prints (`tree_gap`, `grad_gaps`).

make_optax_traces.py, make_optax_schedules.py, make_flax_conv_pool.py,
make_flax_cnn_scan5.py and make_flax_inits.py write compact JSON (no
spaces, no final newline, `write`); the generators of Flax checkpoints
write NAME.msgpack and NAME.json (`save`, `write_json`), most of them in
two processes (`main_f64`). Each array in a fixture is {"shape": [...],
"data": [flat row-major floats]} (`flax_keys.arr`). A generator writes to
tests/fixtures/ by default, or to the directory given as its argument
(`out_dir`), to compare a fresh run with the committed file:

    python tests/python/make_optax_traces.py /tmp/out
    cmp /tmp/out/optax_traces.json tests/fixtures/optax_traces.json

jax and flax are imported inside the functions that use them:
`jax_enable_x64` is process-wide and read when jax is first imported, so a
generator's float64 process calls `enable_x64_in_f64_pass` before it
imports jax, and may import this module before that.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

from flax_keys import from_arr, leaves

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"

# The argument that makes a generator's second process, its float64 pass
# (`main_f64`).
F64 = "--f64-reference"


def normal(seed, shape, scale=1.0):
    """Standard normal draws from `default_rng(seed)`, times `scale`, in
    float32. With an integer seed every input is drawn afresh from its own
    seed, so that a case does not depend on which cases ran before it;
    `seed` may also be a numpy Generator (`default_rng` returns it
    unchanged), whose stream the draws continue."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def out_dir():
    """The directory a generator writes into: its first argument other
    than F64, or tests/fixtures/; made if missing."""
    args = [a for a in sys.argv[1:] if a != F64]
    out = pathlib.Path(args[0]) if args else FIXTURES
    out.mkdir(parents=True, exist_ok=True)
    return out


def write(name, obj):
    """Writes obj as compact JSON (no spaces, no final newline) to NAME in
    `out_dir()`."""
    path = out_dir() / name
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def write_json(path, fields):
    """Writes fields to path as compact JSON (no spaces) with a final
    newline, as the checkpoint generators' NAME.json files are."""
    with open(path, "w") as f:
        json.dump(fields, f, separators=(",", ":"))
        f.write("\n")


def perturb(variables, rng):
    """The checkpoint of a fixture: Flax variables moved off their initial
    values, so that zero biases and unit scales hide nothing. Leaf by leaf
    in the sorted order of the flattened paths (collections first, so
    "batch_stats" before "params"), with float32 draws from rng, a numpy
    Generator (`normal`): params p + 0.1 * N(0, 1); batch_stats `mean` +
    0.1 * N(0, 1) and `var` * exp(0.2 * N(0, 1)) (still positive); any
    other leaf is an error. Every leaf a float32 jax array.

    Returns the state dict (`flax.serialization.to_state_dict`) of the
    result, its dicts in sorted key order as `unflatten_dict` builds them:
    for variables of plain arrays, the variables themselves. Boxed leaves
    (`nn.with_logical_partitioning`) are moved inside their box (their
    paths end in "value"); `flax.serialization.from_state_dict(variables,
    perturb(variables, rng))` puts the boxes back, in the variables' key
    order."""
    import jax.numpy as jnp
    from flax.serialization import to_state_dict
    from flax.traverse_util import flatten_dict, unflatten_dict

    flat = flatten_dict(to_state_dict(variables))
    new = {}
    for path in sorted(flat):
        p = np.asarray(flat[path], np.float32)
        if path[0] == "params":
            q = p + 0.1 * normal(rng, p.shape)
        elif path[0] == "batch_stats" and path[-1] == "mean":
            q = p + 0.1 * normal(rng, p.shape)
        elif path[0] == "batch_stats" and path[-1] == "var":
            q = p * np.exp(0.2 * normal(rng, p.shape))
        else:
            raise ValueError(f"no perturbation for {'/'.join(path)}")
        new[path] = jnp.asarray(q, jnp.float32)
    return unflatten_dict(new)


def save(out, name, variables, fields, num_params=None):
    """Writes out/NAME.msgpack, `flax.serialization.to_bytes(variables)`,
    and out/NAME.json (`write_json`): the fields plus "paths", the sorted
    "/" paths of the msgpack's leaves, and "num_params", the number of
    elements of its "params/" leaves (checked against num_params when
    given). Checks first that the msgpack reads back to the variables'
    leaves (`flax_keys.leaves`: boxes are saved as their "value"), each
    float32 and finite. Prints the files' sizes and the saved paths with
    their shapes."""
    import flax
    from flax.traverse_util import flatten_dict

    blob = flax.serialization.to_bytes(variables)
    saved = flatten_dict(flax.serialization.msgpack_restore(blob), sep="/")
    mine = leaves(variables)
    assert sorted(saved) == sorted(mine), name
    for path, value in saved.items():
        assert value.dtype == np.float32, path
        assert np.all(np.isfinite(value)), path
        assert np.array_equal(value, np.asarray(mine[path])), path
    count = int(sum(v.size for k, v in saved.items() if k.startswith("params/")))
    assert num_params is None or count == num_params, count
    fields = dict(fields, paths=sorted(saved), num_params=count)
    (out / f"{name}.msgpack").write_bytes(blob)
    write_json(out / f"{name}.json", fields)
    sizes = {ext: (out / f"{name}.{ext}").stat().st_size for ext in ("msgpack", "json")}
    print(f"wrote {out / name}.msgpack ({sizes['msgpack']} bytes) and .json ({sizes['json']} bytes): "
          f"{count} parameters")
    for path in fields["paths"]:
        print(f"  {path} {saved[path].shape}")


def enable_x64_in_f64_pass():
    """In a generator's float64 process (F64 among its arguments, see
    `main_f64`) sets JAX_ENABLE_X64, which jax reads when it is first
    imported: a generator calls this before it imports jax."""
    if F64 in sys.argv:
        os.environ["JAX_ENABLE_X64"] = "1"


def main_f64(script, write, name, add_f64):
    """The main of a generator whose NAME.json also holds float64 results,
    in two processes, since `jax_enable_x64` is process-wide. The first
    runs write(out) (`out_dir()`; it writes NAME.msgpack and NAME.json in
    float32, and maybe other files), then runs `script` again with F64 and
    the same directory. In that second process (JAX_ENABLE_X64 set by
    `enable_x64_in_f64_pass`) it reads NAME.json's fields and
    NAME.msgpack's leaves back, widened to float64 (`msgpack_restore`'s
    nested dicts, no boxes), calls add_f64(fields, variables), which adds
    the float64 results to the fields, and rewrites NAME.json
    (`write_json`)."""
    out = out_dir()
    if F64 not in sys.argv:
        write(out)
        subprocess.run([sys.executable, script, F64, str(out)], check=True)
        return
    import flax
    import jax
    import jax.numpy as jnp

    path = out / f"{name}.json"
    fields = json.loads(path.read_text())
    blob = (out / f"{name}.msgpack").read_bytes()
    variables = jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, jnp.float64), flax.serialization.msgpack_restore(blob)
    )
    add_f64(fields, variables)
    write_json(path, fields)
    print(f"  {path}: {path.stat().st_size} bytes")


def tree_gap(a, b):
    """max |a - b| over the leaves of two trees with the same paths
    (`flax_keys.leaves`): a float64 pass's check of Flax's gradients
    against those of a plain jax.numpy forward."""
    la, lb = leaves(a), leaves(b)
    assert sorted(la) == sorted(lb)
    return max(float(np.max(np.abs(np.asarray(la[k]) - np.asarray(v)))) for k, v in lb.items())


def grad_gaps(fields, floor=1e-30, each=False):
    """How far the float32 gradients fields["grads"] are from the float64
    ones fields["grads_f64"] (`arr` dicts by "params/<path>"): (max |grad -
    grad_f64| over every leaf, the largest of a leaf's max |grad -
    grad_f64| / max(its largest |grad_f64|, floor)). With each, prints
    every leaf's."""
    gap, rel = 0.0, 0.0
    for k, v in fields["grads_f64"].items():
        g64 = from_arr(v)
        d = float(np.max(np.abs(from_arr(fields["grads"][k]) - g64)))
        gap = max(gap, d)
        rel = max(rel, d / max(float(np.max(np.abs(g64))), floor))
        if each:
            print(f"  {k}: max |grad - grad_f64| {d:.2e} (largest |grad_f64| {np.max(np.abs(g64)):.2e})")
    return gap, rel
