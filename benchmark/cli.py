"""The ``aegisbench`` command line.

Exit status: 0 success, 2 bad input (one line on stderr naming the file/row/field,
no traceback), 1 internal error. Each command lives in the module that owns it and
exposes ``register(subparsers)``; this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from aegisbench import __version__
from aegisbench.errors import BadInput

# Modules that contribute sub-commands via ``register(subparsers)``.
COMMAND_MODULES = [
    "aegisbench.builders.commands",
    "aegisbench.leaderboard.commands",
    "aegisbench.corruptions.commands",
    "aegisbench.evaluation.commands",
    "aegisbench.detectors.commands",
    "aegisbench.firespread.commands",
]

log = logging.getLogger("aegisbench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aegisbench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"aegisbench {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        rc = args.func(args)
    except BadInput as exc:
        print(f"aegisbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aegisbench: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
