"""``python -m edgetune_runtime info|run|bench|check PACKAGE`` — the board-side command line;
``baseline MODEL --inputs FILE.npz`` times a model with its own runtime alone."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

# A board has only the runtime; on a full install, skip loading TVM's 259 MB compiler library.
os.environ.setdefault("TVM_USE_RUNTIME_LIB", "1")

from .errors import LoaderError  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m edgetune_runtime", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("info", "show the manifest summary"), ("check", "compare with the stored reference outputs"), ("bench", "time inference"), ("run", "run on .npy/.npz inputs")):
        s = sub.add_parser(name, help=text)
        s.add_argument("package", type=Path)
        s.add_argument("--json", action="store_true", help="machine-readable output")
    run = sub.choices["run"]
    run.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE", help=".npy per input (by position or NAME=), or one .npz with all inputs by name")
    run.add_argument("--output", type=Path, help="write outputs to this .npz")
    bench = sub.choices["bench"]
    bench.add_argument("--runs", type=int, default=50, help="timed runs after the warm-up (default 50)")
    bench.add_argument("--profile", action="store_true", help="also time every kernel inside the network")
    bench.add_argument("--strict", action="store_true", help="exit 3 when the machine is throttled or busy")
    bench.add_argument("--max-warmup", type=float, default=20.0, metavar="S", help="warm-up limit in seconds")
    bench.add_argument("--baseline", type=Path, metavar="MODEL", help="also time MODEL with its own runtime "
                       "(onnxruntime / LiteRT), same inputs and threads, alternating")
    base = sub.add_parser("baseline", help="time a model with its own runtime (onnxruntime / LiteRT) alone")
    base.add_argument("model", type=Path)
    base.add_argument("--inputs", type=Path, required=True, metavar="FILE.npz", help="the model's inputs by name")
    base.add_argument("--runs", type=int, default=30, help="timed runs after the warm-up (default 30)")
    base.add_argument("--max-warmup", type=float, default=10.0, metavar="S", help="warm-up limit in seconds")
    base.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def _inputs(items: list[str]) -> tuple[list[Any], dict[str, Any]]:
    import numpy as np

    args, kwargs = [], {}
    for item in items:
        name, sep, file = item.rpartition("=")
        if file.endswith(".npz"):
            with np.load(file) as data:
                kwargs.update({k: data[k] for k in data.files})
        elif sep:
            kwargs[name] = np.load(file)
        else:
            args.append(np.load(file))
    return args, kwargs


def _info(args: argparse.Namespace) -> dict[str, Any]:
    from .loader import read_manifest

    m = read_manifest(args.package)
    keys = ("format", "edgetune", "profile", "arch", "runtime", "model", "inputs", "outputs", "verification", "tuning",
            "kind", "range")
    return {k: m.get(k) for k in keys}


def _run(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from .loader import load

    model = load(args.package)
    positional, named = _inputs(args.input)
    if not positional and not named:
        raise LoaderError("no inputs given", "pass --input FILE.npy (one per input) or --input inputs.npz")
    out = model.run(*positional, **named)
    if args.output:
        np.savez(args.output, **out)
    return {name: {"shape": list(v.shape), "dtype": str(v.dtype), "min": float(v.min()), "max": float(v.max()), "mean": float(v.mean())} for name, v in out.items()}


def _bench(args: argparse.Namespace) -> dict[str, Any]:
    from .loader import load

    if args.runs < 2:
        raise LoaderError("--runs must be at least 2", "e.g. --runs 50")
    return load(args.package).measure(runs=args.runs, profile=args.profile, max_warmup_s=args.max_warmup,
                                      baseline=args.baseline)


def _baseline(args: argparse.Namespace) -> dict[str, Any]:
    """The model's own runtime on the threads a package gets here, after a warm-up, with the
    machine's state: what a relative tuning target (``--latency NET=0.8x``) is a share of."""
    import numpy as np

    from . import baseline as base
    from . import measure
    from .loader import default_threads

    if args.runs < 2:
        raise LoaderError("--runs must be at least 2", "e.g. --runs 30")
    with np.load(args.inputs) as data:
        inputs = {k: data[k] for k in data.files}
    default_threads()
    threads = int(os.environ.get("TVM_NUM_THREADS") or os.environ["OMP_NUM_THREADS"])
    label, call = base.runner(args.model, inputs, threads)
    state = measure.system_state()
    return {"runtime": label, "threads": threads, "system": state, "warnings": measure.warnings(state),
            "latency": measure.latency(call, args.runs, args.max_warmup)}


def _check(args: argparse.Namespace) -> dict[str, Any]:
    from .loader import load

    return load(args.package).check()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        result = {"info": _info, "run": _run, "bench": _bench, "check": _check, "baseline": _baseline}[args.command](args)
    except LoaderError as err:
        print(f"error: {err.message}", file=sys.stderr)
        if err.hint:
            print(f"hint: {err.hint}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError) as err:  # an input file that does not read, a malformed .npz …
        print(f"error: {type(err).__name__}: {str(err)[:300]}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=None if args.json else 2, default=str))
    if args.command == "check" and not result["passed"]:
        return 1
    bad = [w["text"] for w in result.get("warnings", []) if w["level"] == "bad"] if args.command == "bench" else []
    if bad and args.strict:
        for text in bad:
            print(f"refused (--strict): {text}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
