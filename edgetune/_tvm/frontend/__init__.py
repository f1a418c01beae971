"""Model formats into Relax: :mod:`.onnx` (with :mod:`.recurrent`, :mod:`.onnx_ops` and
:mod:`.onnx_loop` in front of TVM's converter map) and :mod:`.tflite`."""
