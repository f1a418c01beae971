"""Real MediaPipe models for the tests, from the MediaPipe wheel on PyPI (no model hub).

    .venv/bin/python scripts/fetch_test_models.py     # run by scripts/install.sh

MediaPipe 0.10.14 ships its solution models inside the wheel; three of them are what TVM 0.27
cannot import on its own: the full-range face detector and the pose detector (sparse weights)
and the selfie segmenter (the custom op Convolution2DTransposeBias). They land in
tests/.models/ (ignored by git); the wheel is fetched once (42 MB) and removed.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "mediapipe==0.10.14"
MODELS = {
    "face_detection_full_range_sparse.tflite": "mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite",
    "pose_detection.tflite": "mediapipe/modules/pose_detection/pose_detection.tflite",
    "selfie_segmentation.tflite": "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
}
DEST = Path(__file__).resolve().parents[1] / "tests" / ".models"


def main() -> int:
    if all((DEST / name).is_file() for name in MODELS):
        print(f"test models present in {DEST}")
        return 0
    DEST.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux2014_x86_64",
               "--dest", tmp, WHEEL]
        subprocess.run(cmd, check=True)
        (wheel,) = Path(tmp).glob("mediapipe-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            for name, member in MODELS.items():
                (DEST / name).write_bytes(zf.read(member))
    print(f"test models written to {DEST}: {', '.join(MODELS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
