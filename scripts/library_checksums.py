"""sha256 of the libraries edgetune builds for a set of models × profiles, to show that a change
to the compiler core leaves the packages as they were (builds are deterministic: the same
source, records and TVM give the same bytes).

    .venv/bin/python scripts/library_checksums.py OUT.json            # build and record
    .venv/bin/python scripts/library_checksums.py OUT.json --against BEFORE.json

Models: the bundled examples, int8 TFLite and QDQ ONNX, a transformer encoder, a CRNN, a VAD
with ``If``, a loop decided by the data; profiles host, pi4, pi5 (no reference check: only the
library's bytes matter). Exit 1 when ``--against`` finds a difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def models(work: Path) -> dict[str, Path]:
    import models as m
    import quant_models
    import rnn_models
    import zoo
    import zoo_transformers

    mbv3 = zoo.mobilenet_v3(work / "mobilenet_v3.onnx", size=96)
    return {
        "squeezenet": REPO / "examples" / "squeezenet.onnx",
        "face_detection": REPO / "examples" / "face_detection_short_range.tflite",
        "int8_tflite": m.int8_tflite(work / "int8.tflite"),
        "mobilenet_v3_qdq": quant_models.qdq_onnx(mbv3, work / "mobilenet_v3_qdq.onnx"),
        "bert": zoo_transformers.bert(work / "bert.onnx"),
        "crnn": rnn_models.crnn(work / "crnn.onnx", width=64),
        "vad": rnn_models.streaming_vad(work / "vad.onnx"),
        "run_time_loop": rnn_models.run_time_loop(work / "loop.onnx"),
    }


def checksums(profiles: list[str]) -> dict[str, str]:
    from edgetune.package import PackageOptions, package
    from edgetune.util import sha256_file

    out = {}
    with tempfile.TemporaryDirectory(prefix="edgetune-checksums-") as tmp:
        work = Path(tmp)
        binds = {"vad": {"sr": "16000"}}
        for name, path in models(work).items():
            for profile in profiles:
                pkg = work / f"{name}-{profile}"
                package(PackageOptions(model=path, device=profile, output=pkg, verify=False, use_records=False,
                                       bindings=binds.get(name, {})))
                out[f"{name}/{profile}"] = sha256_file(pkg / "model.so")
                print(f"{name:18} {profile:6} {out[f'{name}/{profile}'][:16]}", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--against", type=Path, help="a JSON this script wrote before the change")
    parser.add_argument("--profiles", default="host,pi4,pi5")
    args = parser.parse_args()
    sums = checksums(args.profiles.split(","))
    args.out.write_text(json.dumps(sums, indent=1) + "\n")
    if args.against is None:
        return 0
    before = json.loads(args.against.read_text())
    changed = sorted(k for k in before if sums.get(k) != before[k])
    for key in changed:
        print(f"CHANGED {key}: {before[key][:16]} → {sums.get(key, 'missing')[:16]}")
    print(f"{len(before) - len(changed)} of {len(before)} libraries identical")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
