"""``python -m edgetune_runtime.rpc_serve --host H --port P --port-end E --key-file F
[--tracker HOST:PORT --custom-addr A]``: TVM's RPC server, with its key read from a file only
the board's user can read (deleted once read) rather than from the command line, which every
local user sees in ``ps``. TVM's handshake refuses a client that does not present the key, so
another user of the board or the host cannot run code through the server (README: Trust
model)."""

from __future__ import annotations

import argparse
import logging
import os
import sys


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m edgetune_runtime.rpc_serve")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--port-end", type=int, required=True)
    p.add_argument("--key-file", help="a file holding the session key; removed once read")
    p.add_argument("--key", default="", help="a key that is no secret (a tracker's resource name)")
    p.add_argument("--tracker")
    p.add_argument("--custom-addr")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    """Run TVM's RPC server (``tvm.exec.rpc_server.main``) with the key from ``--key-file``."""
    args = _args(argv)
    if args.key_file:
        with open(args.key_file) as fh:
            args.key = fh.read().strip()
        os.unlink(args.key_file)
    from tvm.exec import rpc_server

    logging.basicConfig(level=logging.WARNING)
    rpc_server.main(argparse.Namespace(host=args.host, port=args.port, port_end=args.port_end, tracker=args.tracker,
                                       key=args.key, through_proxy=False, load_library=None,
                                       custom_addr=args.custom_addr, silent=True, fork=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
