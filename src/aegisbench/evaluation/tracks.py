"""Tracks as plug-ins: what a track's submissions contain, how they are read and scored.

A :class:`Track` is registered once under its name (``sar``, ``smoke``,
``firespread``); the registry rejects a second track of the same name. ``validate``
and ``evaluate`` (one command each) look the track up from ``submission.yaml`` and
call its ``read`` and ``score``; everything else (the metadata checks, provenance,
the results schema and writer) is shared and lives in
:mod:`aegisbench.evaluation.submission` and :mod:`aegisbench.evaluation.results`.

>>> sorted(t.name for t in tracks())
['firespread', 'sar', 'smoke']
>>> get_track("smoke").kind
'detection'
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from aegisbench.vocab import TRACKS

@dataclass(frozen=True)
class Track:
    """One track.

    ``read(folder, meta, index, params, problems)`` reads and checks the track's
    prediction files, adding every problem to ``problems``; it returns
    ``(form, predictions, extras)`` (``extras``: a dict of optional parts such as the
    WARP patch test). ``score(sub, index, params, executor, progress)`` returns an
    :class:`~aegisbench.evaluation.results.Evaluation`. ``summary(sub)`` is the one
    line ``validate`` prints.
    """

    name: str
    kind: str  # "detection" or "forecast"
    contents: str  # what a submission of this track holds (one sentence, for help and docs)
    read: Callable
    score: Callable
    summary: Callable

    def __post_init__(self) -> None:
        if self.name not in TRACKS:
            raise ValueError(f"track {self.name!r} is not in the vocabulary's TRACKS {list(TRACKS)}")
        if self.kind not in ("detection", "forecast"):
            raise ValueError(f"track kind must be 'detection' or 'forecast', got {self.kind!r}")
        for name in ("read", "score", "summary"):
            if not callable(getattr(self, name)):
                raise TypeError(f"Track.{name} must be callable")


_REGISTRY: dict[str, Track] = {}
_loaded = False
_loading = threading.Lock()


def register_track(track: Track) -> Track:
    """Add a track; a second track of the same name is refused."""
    if not isinstance(track, Track):
        raise TypeError(f"expected a Track, got {type(track).__name__}")
    if track.name in _REGISTRY:
        raise ValueError(f"track {track.name!r} is already registered")
    _REGISTRY[track.name] = track
    return track


def _load() -> None:
    """Import the modules that register the tracks (plain imports, so the import graph
    and the DVC dependencies derived from it see them). Thread-safe: a second caller waits
    until every track is registered (the submission server validates uploads on threads)."""
    global _loaded
    if _loaded:
        return
    with _loading:
        if not _loaded:
            from aegisbench.evaluation import detection  # noqa: F401  (registers sar, smoke)
            from aegisbench.evaluation import firespread_track as track  # noqa: F401  (registers firespread)
            _loaded = True


def tracks() -> list[Track]:
    """Every registered track, in vocabulary order."""
    _load()
    return [_REGISTRY[n] for n in TRACKS if n in _REGISTRY]


def get_track(name: str) -> Track:
    """The track called ``name``; ``KeyError`` naming the known ones otherwise."""
    _load()
    if name not in _REGISTRY:
        raise KeyError(f"unknown track {name!r} (expected one of {sorted(_REGISTRY)})")
    return _REGISTRY[name]
