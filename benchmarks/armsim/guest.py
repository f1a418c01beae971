"""Runs inside the emulated board (qemu-aarch64 with libtbcount.so): one warm-up inference, then
N inferences each between the plugin's region marks (syscall 4242: 1 opens, 0 closes), then the
process's memory map, so executed blocks can be attributed to libraries and their symbols.

    python3 guest.py edgetune PACKAGE_DIR   INPUTS.npz N MAPS_OUT
    python3 guest.py onnxruntime MODEL.onnx INPUTS.npz N MAPS_OUT
    python3 guest.py litert MODEL.tflite    INPUTS.npz N MAPS_OUT

INPUTS.npz holds ``in_0``, ``in_1``, … in the model's input order (the same arrays for every
side). Everything runs on one thread: the plugin's counters are not atomic, and the estimate is
of one core.
"""

import ctypes
import os
import sys

for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
import numpy as np  # noqa: E402

MARK = 4242


def main() -> None:
    kind, target, inputs, n, maps_out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    with np.load(inputs) as data:
        arrays = [data[f"in_{i}"] for i in range(len(data.files))]
    if kind == "edgetune":
        import edgetune_runtime

        model = edgetune_runtime.load(target)

        def step() -> None:
            model.run(*arrays)
    elif kind == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = ort.InferenceSession(target, options, providers=["CPUExecutionProvider"])
        feeds = dict(zip((i.name for i in session.get_inputs()), arrays))

        def step() -> None:
            session.run(None, feeds)
    elif kind == "litert":
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=target, num_threads=1)  # XNNPACK: LiteRT's default CPU delegate
        interpreter.allocate_tensors()
        details = interpreter.get_input_details()

        def step() -> None:
            for d, a in zip(details, arrays):
                interpreter.set_tensor(d["index"], a)
            interpreter.invoke()
    else:
        sys.exit(f"unknown kind {kind!r}: edgetune, onnxruntime or litert")
    step()  # warm-up outside the regions: lazy initialisation, allocation, first touch
    libc = ctypes.CDLL(None)
    for _ in range(n):
        libc.syscall(MARK, 1)
        step()
        libc.syscall(MARK, 0)
    with open("/proc/self/maps") as src, open(maps_out, "w") as dst:
        dst.write(src.read())


if __name__ == "__main__":
    main()
