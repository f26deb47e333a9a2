"""The sequence models both sequence suites serve (tests/integration/test_sequences.py over REST,
tests_tritongrpc/test_sequences_grpc.py over gRPC and its stream): the Triton docs' accumulator,
whose running sum is the implicit state the server keeps between a sequence's requests."""

from __future__ import annotations

from pathlib import Path

ACCUMULATOR = '''
import numpy as np
from rosettaserve import Model


class Accumulator(Model):
    """OUTPUT: the sequence's running sum (START: the input alone); CORRID_OUT: its id as the
    model received it."""

    def predict(self, inputs):
        x, state = inputs["INPUT"], inputs["STATE_IN"]
        total = np.where(inputs["START"] == 1, x, state + x).astype(np.int32)
        return {"OUTPUT": total, "STATE_OUT": total, "CORRID_OUT": inputs["CORRID"]}
'''
# Triton's python-backend way: the model keeps each sequence's sum itself, by CORRID, in the
# process it runs in, and answers that process's id
IN_PROCESS = """
import os
import numpy as np
from rosettaserve import Model


class Keeper(Model):
    def load(self):
        self.sums = {}

    def predict(self, inputs):
        out, pids = [], []
        for x, start, ready, corrid in zip(
            inputs["INPUT"], inputs["START"], inputs["READY"], inputs["CORRID"]
        ):
            key = int(corrid[0])
            if ready[0]:
                total = int(x[0]) + (0 if start[0] else self.sums.get(key, 0))
                self.sums[key] = total % (1 << 31)  # (perf_analyzer sends random values)
            out.append([self.sums.get(key, 0)])
            pids.append([os.getpid()])
        return {"OUTPUT": np.array(out, np.int32), "CORRID_OUT": np.array(pids, np.uint64)}
"""
IN_PROCESS_YAML = """\
runtime: python
max_batch_size: 4
instances: 2
isolation: process
inputs: [{name: INPUT, datatype: INT32, shape: [-1, 1]}]
outputs:
  - {name: OUTPUT, datatype: INT32, shape: [-1, 1]}
  - {name: CORRID_OUT, datatype: UINT64, shape: [-1, 1]}
sequence_batching:
  max_sequence_idle_microseconds: 60000000
  direct: {}
  control_input:
    - {name: START, control: [{kind: CONTROL_SEQUENCE_START, int32_false_true: [0, 1]}]}
    - {name: READY, control: [{kind: CONTROL_SEQUENCE_READY, int32_false_true: [0, 1]}]}
    - {name: CORRID, control: [{kind: CONTROL_SEQUENCE_CORRID, data_type: UINT64}]}
"""
CONTROLS = """\
  control_input:
    - {{name: START, control: [{{kind: CONTROL_SEQUENCE_START, int32_false_true: [0, 1]}}]}}
    - {{name: CORRID, control: [{{kind: CONTROL_SEQUENCE_CORRID, data_type: {corrid}}}]}}
  state:
    - input_name: STATE_IN
      output_name: STATE_OUT
      data_type: INT32
      dims: [1]
      initial_state: {{data_type: INT32, dims: [1], zero_data: true}}
"""
BATCHED = """\
runtime: python
max_batch_size: 8
instances: 2
inputs: [{{name: INPUT, datatype: INT32, shape: [-1, 1]}}]
outputs:
  - {{name: OUTPUT, datatype: INT32, shape: [-1, 1]}}
  - {{name: CORRID_OUT, datatype: UINT64, shape: [-1, 1]}}
sequence_batching:
  max_sequence_idle_microseconds: {idle}
  {strategy}
"""
UNBATCHED = """\
runtime: python
instances: 2
inputs: [{name: INPUT, datatype: INT32, shape: [1]}]
outputs:
  - {name: OUTPUT, datatype: INT32, shape: [1]}
  - {name: CORRID_OUT, datatype: BYTES, shape: [1]}
sequence_batching:
  max_sequence_idle_microseconds: 60000000
"""
IDLE_US = 200_000  # the "forgetful" model's: the tests wait well past it
MODELS = {
    # direct slots, batched across sequences, two instances
    "accumulate": BATCHED.format(idle=60_000_000, strategy="direct: {}")
    + CONTROLS.format(corrid="UINT64"),
    # one slot in all: a second sequence waits for the first to end
    "one_slot": BATCHED.replace("max_batch_size: 8", "max_batch_size: 1")
    .replace("instances: 2", "instances: 1")
    .format(idle=60_000_000, strategy="direct: {}")
    + CONTROLS.format(corrid="UINT64"),
    "oldest": BATCHED.format(
        idle=60_000_000,
        strategy="oldest: {max_candidate_sequences: 4, preferred_batch_size: [2], "
        "max_queue_delay_microseconds: 1000}",
    )
    + CONTROLS.format(corrid="UINT64"),
    "forgetful": BATCHED.format(idle=IDLE_US, strategy="direct: {}")
    + CONTROLS.format(corrid="UINT64"),
    # no batch dimension (one slot per instance), string ids
    "accumulate_text": UNBATCHED + CONTROLS.format(corrid="BYTES"),
}


def sequence_repository(repo: Path) -> Path:
    for name, yaml in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "model.yaml").write_text(yaml)
        (repo / name / "1" / "model.py").write_text(ACCUMULATOR)
    (repo / "in_process" / "1").mkdir(parents=True)
    (repo / "in_process" / "model.yaml").write_text(IN_PROCESS_YAML)
    (repo / "in_process" / "1" / "model.py").write_text(IN_PROCESS)
    return repo
