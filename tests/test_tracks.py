"""The track registry: every track a plug-in, duplicates refused, the vocabulary's tracks covered."""

from __future__ import annotations

import pytest

from aegisbench.evaluation import tracks as T
from aegisbench.vocab import DETECTION_TRACKS, TRACKS


def test_every_vocabulary_track_is_registered_once_with_its_kind():
    got = {t.name: t.kind for t in T.tracks()}
    assert list(got) == list(TRACKS)
    assert {n for n, k in got.items() if k == "detection"} == set(DETECTION_TRACKS)
    assert got["firespread"] == "forecast"


def test_a_second_track_of_the_same_name_is_refused():
    sar = T.get_track("sar")
    with pytest.raises(ValueError, match="already registered"):
        T.register_track(T.Track("sar", "detection", "again", sar.read, sar.score, sar.summary))
    assert T.get_track("sar") is sar


@pytest.mark.parametrize("kw, err", [
    ({"name": "thermal"}, ValueError), ({"kind": "segmentation"}, ValueError), ({"score": None}, TypeError)])
def test_a_track_outside_the_vocabulary_or_without_callables_is_refused(kw, err):
    sar = T.get_track("sar")
    base = {"name": "sar", "kind": "detection", "contents": "x", "read": sar.read, "score": sar.score,
            "summary": sar.summary}
    with pytest.raises(err):
        T.Track(**{**base, **kw})
    with pytest.raises(TypeError):
        T.register_track(base)  # a dict is not a Track


def test_unknown_track_names_the_known_ones():
    with pytest.raises(KeyError, match="firespread.*sar.*smoke"):
        T.get_track("thermal")
