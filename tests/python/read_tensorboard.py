"""Reads a flaxen TensorBoard event directory with TensorBoard's own loader
and prints the scalars as JSON. Used by tests/logging_files.rs; needs
`pip install tensorboard`."""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1])
acc.Reload()
out = {}
for tag in acc.Tags()["scalars"]:
    out[tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
print(json.dumps(out))
