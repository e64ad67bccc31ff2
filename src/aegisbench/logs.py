"""Logging of the ``aegisbench`` command: quiet by default, one line per record, no
terminal escapes, each warning once.

* level: INFO for aegisbench (``-v``: DEBUG, ``-q``: WARNING), WARNING for other libraries;
  their INFO output (Ultralytics' trainer dump, banners) only under ``-v``, through the same
  handler;
* every record on one line on stderr, control characters escaped (:func:`printable`) and
  the ANSI colours of frameworks (Ultralytics' ``colorstr``) removed, so a log file holds
  plain text;
* a warning or error whose text was already logged is dropped (:class:`OncePerMessage`);
  Python warnings are log records too, those raised inside installed packages only under
  ``-v`` (:class:`FrameworkNoise`).

>>> f = OncePerMessage()
>>> rec = logging.LogRecord("aegisbench.x", logging.WARNING, __file__, 1, "same %s", ("text",), None)
>>> f.filter(rec), f.filter(rec)
(True, False)
>>> strip_ansi("\\x1b[34m\\x1b[1mtrain:\\x1b[0m done")
'train: done'
"""

from __future__ import annotations

import logging
import os
import re
import sys

from aegisbench.errors import printable

MAX_LOG_CHARS = 4000
#: Third-party loggers whose INFO output (progress dumps, banners) is shown only under ``-v``.
FRAMEWORK_LOGGERS = ("ultralytics",)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_state = {"configured": False, "verbose": False}


def strip_ansi(text: str) -> str:
    """``text`` without ANSI CSI sequences (colours, cursor movement)."""
    return _ANSI.sub("", text)


class OneLineFormatter(logging.Formatter):
    """Each log message on one line, control characters escaped (see ``printable``); a
    framework's colour codes are removed first (our own messages keep theirs escaped, so a
    file name cannot forge a colour and still shows what it holds)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = record.message if record.name.startswith("aegisbench") else strip_ansi(record.message)
        record.message = printable(text, MAX_LOG_CHARS)
        return super().formatMessage(record)


class OncePerMessage(logging.Filter):
    """Drops a WARNING-or-worse record whose logger, level and text were already let through."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.levelno, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


class FrameworkNoise(logging.Filter):
    """Outside ``-v``, drops Python warnings raised inside installed packages (``py.warnings``
    records naming a ``site-packages`` file): a framework talking to itself, not to the user."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "py.warnings" and re.search(r"[/\\](site|dist)-packages[/\\]",
                                                               record.getMessage().split(":", 1)[0]))


class StderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever ``sys.stderr`` is when a record is written (so a replaced
    or captured stderr is followed, never a closed one)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure(verbose: bool = False, quiet: bool = False, stream=None) -> logging.Handler | None:
    """Set the levels and install the one stderr handler of the command line (replacing an
    earlier one; on ``stream`` when given). Like ``logging.basicConfig``, no handler is added
    to a root logger that another program (or pytest) already gave handlers. Returns the
    handler installed, if any."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_aegisbench", False)]:
        root.removeHandler(old)
    handler = None
    if stream is not None or not root.handlers:
        handler = StderrHandler() if stream is None else logging.StreamHandler(stream)
        handler.setFormatter(OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
        handler.addFilter(OncePerMessage())
        if not verbose:
            handler.addFilter(FrameworkNoise())
        handler._aegisbench = True
        root.addHandler(handler)
        root.setLevel(logging.INFO if verbose else logging.WARNING)  # third-party libraries
        logging.captureWarnings(True)  # Python warnings as log records: one line, once each
    logging.getLogger("aegisbench").setLevel(logging.DEBUG if verbose else logging.WARNING if quiet
                                             else logging.INFO)
    _state.update(configured=True, verbose=verbose)
    # read by Ultralytics when it is first imported (its logger and progress bars)
    os.environ.setdefault("YOLO_VERBOSE", "True" if verbose else "False")
    for name in FRAMEWORK_LOGGERS:
        if name in sys.modules:
            adopt(name)
    return handler


def adopt(name: str) -> None:
    """Route a framework's own logger (Ultralytics prints to stdout, in colour, with
    ``propagate=False``) through the command line's handler: INFO under ``-v``, else errors
    only. Call it right after importing the framework; a no-op outside the command line."""
    if not _state["configured"]:
        return
    logger = logging.getLogger(name)
    for h in list(logger.handlers):
        logger.removeHandler(h)
    logger.propagate = True
    logger.setLevel(logging.INFO if _state["verbose"] else logging.ERROR)
