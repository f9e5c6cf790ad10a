"""Checks a `train` run directory's logs: the `train_steps` points
(loss and learning rate every N steps, at most one per N, at the first
`scan!` call that reaches each multiple) in `metrics.jsonl`, and the same
points in the TensorBoard events beside the per-epoch ones, read with
TensorBoard's own reader.

    python3 tests/python/check_train_logs.py RUN_DIR N
"""
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run, every = sys.argv[1], int(sys.argv[2])
steps = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
logged = [d for d in steps if d["split"] == "train_steps"]
assert logged, "no train_steps lines"
assert all(d["step"] % every < 5 and d["learning_rate"] > 0 for d in logged), logged
assert len({d["step"] // every for d in logged}) == len(logged), logged
ea = EventAccumulator(run)
ea.Reload()
tags = set(ea.Tags()["scalars"])
assert {"train_steps/loss", "train_steps/learning_rate", "train/loss", "test/accuracy"} <= tags, tags
lr = ea.Scalars("train_steps/learning_rate")
assert [e.step for e in lr] == [d["step"] for d in logged], (lr, logged)
assert all(abs(e.value - d["learning_rate"]) <= 1e-6 * d["learning_rate"] for e, d in zip(lr, logged))
print(f"{len(logged)} learning-rate points every {every} steps, TensorBoard agrees")
