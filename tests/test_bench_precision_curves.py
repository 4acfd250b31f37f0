"""`benchmarks/precision_curves.py`: a run's curve is its log's validations and end."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import precision_curves as bench  # noqa: E402


def test_curve_reads_the_dev_nll_of_each_validation_and_the_training_time(tmp_path):
    events = [{"event": "start", "step": 0, "precision": "bf16"},
              {"event": "valid", "step": 25, "nll": 7.96501},
              {"event": "train", "step": 25, "nll": 8.5},
              {"event": "valid", "step": 50, "nll": 7.16266},
              {"event": "end", "step": 50, "elapsed_s": 12.5}]  # fmt: skip
    (tmp_path / "train_log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert bench.curve(tmp_path) == {
        "precision": "bf16", "elapsed_s": 12.5,
        "dev": [{"step": 25, "dev_nll": 7.965}, {"step": 50, "dev_nll": 7.1627}],
    }
