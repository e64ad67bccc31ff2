"""Tracks as plug-ins: what a track's submissions contain, how they are read and scored.

A :class:`Track` is registered once under its name (``sar``, ``smoke``,
``firespread``) by its plug-in module, declared in :data:`TRACKS_REGISTRY` by module name;
the registry rejects a second track of the same name. ``validate``
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

from collections.abc import Callable
from dataclasses import dataclass

from aegisbench.registry import Registry
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


#: The tracks, from their plug-in modules (declared by name: a string is not an import, so
#: the track modules import this one and not the other way round).
TRACKS_REGISTRY: Registry[Track] = Registry(
    "track", plugins=("aegisbench.evaluation.detection", "aegisbench.evaluation.firespread_track"))


def register_track(track: Track) -> Track:
    """Add a track; a second track of the same name is refused."""
    if not isinstance(track, Track):
        raise TypeError(f"expected a Track, got {type(track).__name__}")
    return TRACKS_REGISTRY.add(track.name, track)


def tracks() -> list[Track]:
    """Every registered track, in vocabulary order."""
    return [TRACKS_REGISTRY.get(n) for n in TRACKS if n in TRACKS_REGISTRY]


def get_track(name: str) -> Track:
    """The track called ``name``; ``KeyError`` naming the known ones otherwise."""
    return TRACKS_REGISTRY.get(name)
