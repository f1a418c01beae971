"""Regenerate examples/squeezenet.onnx: SqueezeNet 1.0 from the onnx package's test data with
its placeholder weights (every weight 0.02) replaced by seeded random ones, so it computes
something non-trivial. Run: python examples/make_examples.py"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from models import randomized_light  # noqa: E402

if __name__ == "__main__":
    print(randomized_light("squeezenet", HERE / "squeezenet.onnx", seed=0))
