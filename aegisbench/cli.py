"""The ``aegisbench`` command line.

Exit status: 0 success, 2 bad input (one line on stderr naming the file/row/field,
no traceback), 1 internal error. A full disk or quota, a read-only or forbidden path, a
name too long and a non-UTF-8 file name are the user's to fix too: one line naming the
path, exit 2. Every error and log line goes through :func:`~aegisbench.errors.printable`,
so text from a file or folder name cannot forge a line or a terminal escape.

Each command lives in the ``commands`` module of the code it drives and is wired in by
``register(subparsers)``; this file only wires them together (by module name: library code
never imports a CLI module) and groups them in ``aegisbench --help`` by pipeline stage
(:data:`COMMAND_GROUPS`).

>>> parser = build_parser()
>>> "conditions:" in parser.format_help() and "run" in parser.format_help()
True
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys

from aegisbench import __version__
from aegisbench.errors import BadInput, printable

# Modules that contribute sub-commands via ``register(subparsers)``.
COMMAND_MODULES = [
    "aegisbench.builders.commands",
    "aegisbench.leaderboard.commands",
    "aegisbench.corruptions.commands",
    "aegisbench.evaluation.commands",
    "aegisbench.detectors.commands",
    "aegisbench.firespread.commands",
    "aegisbench.pipeline.commands",
]
#: ``aegisbench --help`` lists the commands in these groups, in pipeline order; a command
#: in no group is listed under "other" (tests/test_cli.py fails on one).
COMMAND_GROUPS = {
    "data": ("sources", "build", "verify", "export-coco"),
    "conditions": ("calibrate", "preview"),
    "detect": ("train-reference", "detect", "warp-detect"),
    "firespread": ("firespread-baselines", "firespread-simulate", "firespread-report", "firespread-ndws"),
    "evaluate": ("validate", "evaluate"),
    "publish": ("leaderboard", "publish"),
    "pipeline": ("run",),
}

log = logging.getLogger("aegisbench")
#: OSErrors that are the user's to fix (exit 2): storage full or refused, a name too long.
USER_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
               errno.EFBIG: "file too large for the file system or the process limit",
               errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
               errno.EPERM: "operation not permitted", errno.ENAMETOOLONG: "file name too long"}
MAX_LOG_CHARS = 4000


class OneLineFormatter(logging.Formatter):
    """Each log message on one line, control characters escaped (see ``printable``)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message, MAX_LOG_CHARS)
        return super().formatMessage(record)


def failed_path(exc: OSError) -> str:
    """The path an OSError is about: its ``filename``, else (a failed ``write`` carries
    none) the innermost ``path`` argument on its traceback."""
    if exc.filename is not None:
        return os.fsdecode(exc.filename)
    found, tb = None, exc.__traceback__
    while tb is not None:
        value = tb.tb_frame.f_locals.get("path")
        found = value if isinstance(value, (str, os.PathLike)) else found
        tb = tb.tb_next
    return os.fsdecode(found) if found is not None else "(path not known)"


def user_error(exc: BaseException) -> str | None:
    """The one-line message of an exception that is the user's to fix, else None."""
    if isinstance(exc, BadInput):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in USER_ERRNOS:
        return f"{failed_path(exc)}: {USER_ERRNOS[exc.errno]} ({exc.strerror or exc})"
    if isinstance(exc, UnicodeEncodeError) and exc.reason == "surrogates not allowed":
        return f"{exc.object}: a file or folder name is not valid UTF-8; rename it"
    return None


def command_groups(names) -> dict[str, list[str]]:
    """``names`` (the registered commands) by :data:`COMMAND_GROUPS`, plus "other" for the rest."""
    names = list(names)
    groups = {g: [n for n in members if n in names] for g, members in COMMAND_GROUPS.items()}
    grouped = {n for members in groups.values() for n in members}
    groups["other"] = [n for n in names if n not in grouped]
    return {g: members for g, members in groups.items() if members}


class GroupedHelp(argparse.HelpFormatter):
    """Help formatter listing the sub-commands under their :data:`COMMAND_GROUPS` headings."""

    def _format_action(self, action: argparse.Action) -> str:
        if not isinstance(action, argparse._SubParsersAction):
            return super()._format_action(action)
        by_name = {a.dest: a for a in action._get_subactions()}
        parts = []
        for group, names in command_groups(by_name).items():
            parts.append(f"{' ' * self._current_indent}{group}:\n")
            self._indent()
            parts += [super(GroupedHelp, self)._format_action(by_name[n]) for n in names]
            self._dedent()
        return "".join(parts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aegisbench", formatter_class=lambda prog: GroupedHelp(prog, max_help_position=28),
        description="AegisBench: build the disaster-condition dataset repo, run detectors and forecasters, "
                    "evaluate submissions and publish the per-condition leaderboard. `aegisbench COMMAND -h` "
                    "for a command's options.")
    parser.add_argument("--version", action="version", version=f"aegisbench {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    try:
        rc = args.func(args)
    except (BadInput, OSError, UnicodeEncodeError) as exc:
        message = user_error(exc)
        if message is None:
            raise
        print(f"aegisbench {args.command}: error: {printable(message)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aegisbench: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
