"""Runs inside the emulated board (qemu-aarch64 with libtbcount.so): one warm-up inference, then
N inferences each between the plugin's region marks (syscall 4242: 1 opens, 0 closes), then the
process's memory map, so executed blocks can be attributed to libraries and their symbols.

    python3 guest.py edgetune PACKAGE_DIR   INPUTS.npz N MAPS_OUT
    python3 guest.py onnxruntime MODEL.onnx INPUTS.npz N MAPS_OUT
    python3 guest.py litert MODEL.tflite    INPUTS.npz N MAPS_OUT
    python3 guest.py ncnn|ncnn16 MODEL.ncnn.param INPUTS.npz N MAPS_OUT   (ncnn fp32 / its fp16 arithmetic)
    python3 guest.py mnn|mnn16 MODEL.mnn   INPUTS.npz N MAPS_OUT       (MNN precision normal / low)

    … [OUTPUTS_OUT]: the warm-up inference's outputs saved as ``out_0``, ``out_1``, … (.npz), so
    each side's answer can be checked before its cycles count.

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
    outputs_out = sys.argv[6] if len(sys.argv) > 6 else None
    with np.load(inputs) as data:
        arrays = [data[f"in_{i}"] for i in range(len(data.files))]
    if kind == "edgetune":
        import edgetune_runtime

        model = edgetune_runtime.load(target)

        def step() -> list:
            return list(model.run(*arrays).values())
    elif kind == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = ort.InferenceSession(target, options, providers=["CPUExecutionProvider"])
        feeds = dict(zip((i.name for i in session.get_inputs()), arrays))

        def step() -> list:
            return session.run(None, feeds)
    elif kind == "litert":
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=target, num_threads=1)  # XNNPACK: LiteRT's default CPU delegate
        interpreter.allocate_tensors()
        details = interpreter.get_input_details()

        def step() -> list:
            for d, a in zip(details, arrays):
                interpreter.set_tensor(d["index"], a)
            interpreter.invoke()
            return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    elif kind in ("ncnn", "ncnn16"):
        step = _ncnn(target, arrays, half=kind == "ncnn16")
    elif kind in ("mnn", "mnn16"):
        step = _mnn(target, arrays, half=kind == "mnn16")
    else:
        sys.exit(f"unknown kind {kind!r}: edgetune, onnxruntime, litert, ncnn, ncnn16, mnn or mnn16")
    first = step()  # warm-up outside the regions: lazy initialisation, allocation, first touch
    if outputs_out:
        np.savez(outputs_out, **{f"out_{i}": np.asarray(a) for i, a in enumerate(first)})
    libc = ctypes.CDLL(None)
    for _ in range(n):
        libc.syscall(MARK, 1)
        step()
        libc.syscall(MARK, 0)
    with open("/proc/self/maps") as src, open(maps_out, "w") as dst:
        dst.write(src.read())


def _ncnn(param: str, arrays: list, half: bool):
    """ncnn on a ``pnnx`` conversion (blobs ``in0``… / ``out0``…): fp32, or with ``half`` its
    default on a core with ``asimdhp`` — fp16 storage, packing and arithmetic."""
    import ncnn

    net = ncnn.Net()
    net.opt.num_threads = 1
    net.opt.use_fp16_packed = net.opt.use_fp16_storage = net.opt.use_fp16_arithmetic = half
    net.opt.use_bf16_storage = False
    net.load_param(param)
    net.load_model(param[: -len(".param")] + ".bin")
    names, outs = net.input_names(), net.output_names()

    def step() -> list:
        with net.create_extractor() as ex:
            for name, a in zip(names, arrays):
                ex.input(name, ncnn.Mat(np.ascontiguousarray(a[0] if a.ndim == 4 else a)))
            return [np.array(ex.extract(o)[1]) for o in outs]

    return step


def _mnn(model: str, arrays: list, half: bool):
    """MNN's module API on an ``mnnconvert`` conversion: precision normal (fp32) or low (fp16
    where the core computes it)."""
    import MNN

    config = {"backend": "CPU", "precision": "low" if half else "normal", "numThread": 1}
    net = MNN.nn.load_module_from_file(model, [], [], runtime_manager=MNN.nn.create_runtime_manager((config,)))
    values = [MNN.expr.const(a, list(a.shape), MNN.expr.NCHW) for a in arrays]

    def step() -> list:
        outs = net.forward(values)
        return [np.array(o.read()) for o in (outs if isinstance(outs, (list, tuple)) else [outs])]

    return step


if __name__ == "__main__":
    main()
