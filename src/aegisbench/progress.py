"""Progress of the long stages (build, train, detect, evaluate) that a log file can read.

On a terminal a stage shows a tqdm bar; when stderr is not a terminal (``dvc repro``, a
log file, CI), or the bar is turned off (``aegisbench --no-progress``), it logs one plain
line every :data:`INTERVAL_S` seconds instead, and a last one when it ends::

    detect sar: 120/400 img, 30%, 1.9 img/s, eta 2m30s

The CLI sets the mode with :func:`configure` (``-q`` turns progress off); library callers
pass ``enabled=False`` for no output at all.

>>> configure(bar=False, interval=0)
>>> with progress(3, "demo", unit="step") as p:
...     p.update(2)
...     p.n
2
>>> format_eta(150), format_eta(4000), format_eta(None)
('2m30s', '1h06m', '?')
>>> configure()
"""

from __future__ import annotations

import logging
import math
import sys
import time

log = logging.getLogger("aegisbench.progress")

#: Seconds between plain progress lines (``aegisbench --progress-interval``).
INTERVAL_S = 10.0
_settings = {"bar": True, "interval": INTERVAL_S, "enabled": True}


def configure(*, bar: bool = True, interval: float = INTERVAL_S, enabled: bool = True) -> None:
    """``bar``: a tqdm bar when stderr is a terminal (else plain lines); ``interval``:
    seconds between plain lines; ``enabled``: False turns every progress report off."""
    if not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval >= 0):
        raise ValueError(f"progress interval must be a finite number of seconds >= 0, got {interval!r}")
    _settings.update(bar=bool(bar), interval=float(interval), enabled=bool(enabled))


def format_eta(seconds: float | None) -> str:
    """``45s``, ``2m30s``, ``1h06m``; ``?`` when not known."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class LineProgress:
    """tqdm's ``update``/``close``/``set_postfix_str`` interface, written as a log line at
    most every ``interval`` seconds (and once at the end)."""

    def __init__(self, total: int | None, desc: str, unit: str, interval: float,
                 clock=time.monotonic) -> None:
        self.total, self.desc, self.unit, self.interval = total, desc, unit, interval
        self.n, self._clock, self._closed, self._postfix = 0, clock, False, ""
        self._start = self._last = clock()

    def line(self) -> str:
        """``desc: n/total unit, pct%, rate unit/s, eta ...`` (parts unknown are left out)."""
        elapsed = max(self._clock() - self._start, 1e-9)
        parts = [f"{self.n}/{self.total} {self.unit}" if self.total else f"{self.n} {self.unit}"]
        if self.total:
            parts.append(f"{100 * self.n / self.total:.0f}%")
        if self.n:
            parts.append(f"{self.n / elapsed:.3g} {self.unit}/s")
        if self.total and self.n < self.total:
            parts.append("eta " + format_eta((self.total - self.n) * elapsed / self.n if self.n else None))
        else:
            parts.append("took " + format_eta(elapsed))
        return f"{self.desc}: {', '.join(parts)}" + (f" ({self._postfix})" if self._postfix else "")

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self._clock()
        if now - self._last >= self.interval and not self._closed:
            self._last = now
            log.info("%s", self.line())

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self._postfix = str(text)

    def set_description(self, desc: str = "", refresh: bool = True) -> None:
        self.desc = desc

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            log.info("%s", self.line())

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Silent(LineProgress):
    def __init__(self, total=None, desc="", unit="it") -> None:
        super().__init__(total, desc, unit, math.inf)

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        self._closed = True


def progress(total: int | None, desc: str, unit: str = "it", *, enabled: bool = True):
    """A progress reporter for ``total`` steps: tqdm on a terminal, :class:`LineProgress`
    otherwise, a silent one when ``enabled`` is False or progress is configured off."""
    if not (enabled and _settings["enabled"]):
        return _Silent(total, desc, unit)
    stream = sys.stderr
    if _settings["bar"] and getattr(stream, "isatty", lambda: False)():
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, unit=unit, file=stream)
    return LineProgress(total, desc, unit, _settings["interval"])


def trainer_progress(model, desc: str) -> None:
    """Report an Ultralytics training run (``model.add_callback``) batch by batch through
    :func:`progress`: ``desc: 130/600 batch, 22%, ..., eta 4m10s (epoch 5/20)``."""
    state: dict = {}

    def start(trainer) -> None:
        per_epoch = len(trainer.train_loader)
        state["bar"] = progress(trainer.epochs * per_epoch, desc, unit="batch")
        state["epochs"] = trainer.epochs

    def batch(trainer) -> None:
        bar = state.get("bar")
        if bar is not None:
            bar.set_postfix_str(f"epoch {trainer.epoch + 1}/{state['epochs']}", refresh=False)
            bar.update(1)

    def end(trainer) -> None:
        bar = state.pop("bar", None)
        if bar is not None:
            bar.close()

    model.add_callback("on_train_start", start)
    model.add_callback("on_train_batch_end", batch)
    model.add_callback("on_train_end", end)
