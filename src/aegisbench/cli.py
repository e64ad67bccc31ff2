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
import textwrap

from aegisbench import isa

isa.pin()  # the command makes bytes: x86-64-v3 kernels, before NumPy, OpenCV or torch load (aegisbench.isa)

from aegisbench import __version__, logs, overlap, progress  # noqa: E402
from aegisbench.errors import BadInput, printable  # noqa: E402
from aegisbench.fields import did_you_mean  # noqa: E402
from aegisbench.logs import MAX_LOG_CHARS, OneLineFormatter  # noqa: E402,F401  (re-exported)

# Modules that contribute sub-commands via ``register(subparsers)``.
COMMAND_MODULES = [
    "aegisbench.builders.commands",
    "aegisbench.leaderboard.commands",
    "aegisbench.corruptions.commands",
    "aegisbench.evaluation.commands",
    "aegisbench.detectors.commands",
    "aegisbench.firespread.commands",
    "aegisbench.pipeline.commands",
    "aegisbench.service.commands",
]
#: ``aegisbench --help`` lists the commands in these groups, in pipeline order; a command
#: in no group is listed under "other" (tests/test_cli.py fails on one).
COMMAND_GROUPS = {
    "data": ("sources", "build", "verify", "export-coco"),
    "conditions": ("calibrate", "preview"),
    "detect": ("train-reference", "train-seeds", "detect", "warp-detect", "reference-seeds"),
    "firespread": ("firespread-baselines", "firespread-simulate", "firespread-report", "firespread-ndws"),
    "evaluate": ("validate", "evaluate", "import-published"),
    "publish": ("leaderboard", "export", "publish"),
    "pipeline": ("run", "pull", "push"),
    "host a leaderboard": ("team", "serve", "worker", "submit", "hosted-board"),
}

log = logging.getLogger("aegisbench")
#: OSErrors that are the user's to fix (exit 2): storage full or refused, a name too long.
USER_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
               errno.EFBIG: "file too large for the file system or the process limit",
               errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
               errno.EPERM: "operation not permitted", errno.ENAMETOOLONG: "file name too long"}


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions and examples as written (line breaks kept), and every option's default
    shown, except when there is none (None, off) or its help already says what it is."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """Prose paragraphs wrapped to the terminal; a paragraph with indented lines (examples)
        kept line by line."""
        out = []
        for para in text.split("\n\n"):
            lines = para.splitlines()
            if any(line.startswith("  ") for line in lines) or len(lines) > 1 and lines[0].endswith(":"):
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(textwrap.fill(" ".join(lines), width, initial_indent=indent, subsequent_indent=indent,
                                         break_on_hyphens=False))
        return "\n\n".join(out)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or "(default" in text or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse, naming the closest choice of a mistyped command or choice-valued option
    (``invalid choice: 'evalute' ... (did you mean 'evaluate'?)``)."""

    def _check_value(self, action: argparse.Action, value) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            hint = did_you_mean(value, action.choices or ())
            raise argparse.ArgumentError(action, exc.message + hint) from None


def command(sub: argparse._SubParsersAction, name: str, summary: str, details: str = "",
            examples: tuple[str, ...] | list[str] = (), **kwargs) -> argparse.ArgumentParser:
    """Add sub-command ``name``: ``summary`` (one line) in ``aegisbench --help`` and on top of
    its own help, then ``details``, then its ``examples`` (each a command line, ``# comment`` allowed)."""
    description = summary[0].upper() + summary[1:] + "." + (f"\n\n{details}" if details else "")
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) if examples else None
    return sub.add_parser(name, help=summary, description=description, epilog=epilog,
                          formatter_class=HelpFormatter, **kwargs)


#: How ``aegisbench run`` hands -v/-q and --progress-interval to the commands of its stages.
VERBOSITY_ENV, INTERVAL_ENV = "AEGISBENCH_VERBOSITY", "AEGISBENCH_PROGRESS_INTERVAL"


def export_global_options(args: argparse.Namespace) -> None:
    """Export the global options for child ``aegisbench`` processes (the ``dvc repro`` stages)."""
    os.environ[VERBOSITY_ENV] = "verbose" if args.verbose else "quiet" if args.quiet else "normal"
    os.environ[INTERVAL_ENV] = repr(float(args.progress_interval))


def add_global_options(p: argparse.ArgumentParser, *, top: bool) -> None:
    """-v/-q/--no-progress/--progress-interval, accepted before and after the sub-command: on a
    sub-command their default is SUPPRESS, so a value given before it is kept."""
    g = p.add_argument_group("global options (before or after the command)")

    def default(value):
        return value if top else argparse.SUPPRESS
    interval = float(os.environ.get(INTERVAL_ENV) or progress.INTERVAL_S)  # `aegisbench run` sets it for its stages
    g.add_argument("-v", "--verbose", action="store_true", default=default(False),
                   help="debug logging, and the frameworks' own output (Ultralytics' trainer and predictor)")
    g.add_argument("-q", "--quiet", action="store_true", default=default(False),
                   help="only warnings and errors; no progress")
    g.add_argument("--no-progress", action="store_true", default=default(False),
                   help="no progress bar; a plain progress line every --progress-interval seconds instead "
                        "(what a log file or `dvc repro` always gets)")
    g.add_argument("--progress-interval", type=float, default=default(interval), metavar="SECONDS",
                   help="seconds between plain progress lines" + (f" (default: {progress.INTERVAL_S:g})" if not top
                                                                  else ""))


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


class GroupedHelp(HelpFormatter):
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
    parser = Parser(
        prog="aegisbench", formatter_class=lambda prog: GroupedHelp(prog, max_help_position=28),
        description="AegisBench: build the disaster-condition dataset repo, run detectors and forecasters, "
                    "evaluate submissions and publish the per-condition leaderboard.\n\n"
                    "`aegisbench COMMAND -h` shows a command's options, defaults and examples.",
        epilog="examples:\n"
               "  aegisbench run --fast           # the whole pipeline on a few images (runs/fast)\n"
               "  aegisbench run                  # the whole pipeline (dvc repro), prints where the page is\n"
               "  aegisbench evaluate submissions/my_yolo -v   # global options go before or after the command\n"
               "\nexit status: 0 success, 2 bad input (one line on stderr), 1 internal error")
    parser.add_argument("--version", action="version", version=f"aegisbench {__version__}")
    add_global_options(parser, top=True)
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for p in sub.choices.values():
        add_global_options(p, top=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose and args.quiet:
        parser.error("-v/--verbose and -q/--quiet exclude each other")
    if not (args.verbose or args.quiet):  # as `aegisbench run` was told, in the commands of its stages
        inherited = os.environ.get(VERBOSITY_ENV, "")
        args.verbose, args.quiet = inherited == "verbose", inherited == "quiet"
    logs.configure(verbose=args.verbose, quiet=args.quiet)
    try:
        progress.configure(bar=not args.no_progress, interval=args.progress_interval, enabled=not args.quiet)
    except ValueError as exc:
        parser.error(f"--progress-interval: {exc}")
    for old, new in getattr(args, "deprecated_flags", None) or []:
        log.warning("%s is deprecated, use %s (same meaning)", old, new)
    try:
        overlap.check_args(args)  # no command writes over its own inputs
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
