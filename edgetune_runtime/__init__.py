"""edgetune's on-device runtime loader.

Loads a package written by ``edgetune package`` and runs it with the TVM *runtime* only: no
compiler, no edgetune. Imports nothing but the standard library, numpy and ``tvm`` (lazily).

    import edgetune_runtime
    model = edgetune_runtime.load("out/")
    outputs = model.run(image)            # or model.run(input=image)
"""

from .errors import InputError, LoaderError, PackageMismatchError
from .loader import FORMAT_VERSION, Model, load, read_manifest

__version__ = "0.1.0"
__all__ = ["FORMAT_VERSION", "InputError", "LoaderError", "Model", "PackageMismatchError", "load", "read_manifest"]
