"""Typed view of ``params.yaml``: the single source of every build parameter.

>>> p = Params.from_dict({"benchmark_version": "1.2.3", "sources": {}})
>>> p.benchmark_version, p.build.rows_per_shard, len(p.warp.noise_levels)
('1.2.3', 16, 21)
>>> noise_levels({"start": 0.001, "stop": 0.4, "step": 0.001})[-3:], len(noise_levels("0.001:0.4:0.001"))
((0.398, 0.399, 0.4), 400)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aegisbench.attribution import check_citation, check_homepage, spdx_license
from aegisbench.errors import BadInput
from aegisbench.fields import check_choice, check_int, is_finite_number
from aegisbench.hashing import json_sha256
from aegisbench import paths as paths_
from aegisbench.schema import Declared, param
from aegisbench.readers import read_yaml
from aegisbench.vocab import FIRESPREAD, GEOMETRIES, MODALITIES, TRACKS, WARP_GRID

if TYPE_CHECKING:  # imported lazily at run time (the fire-spread package is optional work)
    from aegisbench.params.firespread import FirespreadParams

_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
DATASET_SECTIONS = ("benchmark_version", "sources", "build", "firespread")  # what decides built bytes


@dataclass(frozen=True)
class SourceParams:
    """One source of a track: an embedded synthetic generator or a local folder."""

    name: str
    track: str
    kind: str
    options: dict = field(default_factory=dict)
    license: str = "unknown"  # an SPDX id (aegisbench/attribution.py); publish refuses unknown
    citation: str = ""  # BibTeX of the source dataset (and its paper)
    description: str = ""
    modality: str = "rgb"  # the sensor: rgb (visible band) or thermal (LWIR); decides which corruptions apply
    homepage: str = ""  # an http(s) URL

    def __post_init__(self) -> None:
        where = f"params.yaml: sources.{self.name}"
        if not _NAME.match(self.name):
            raise BadInput("source name must be snake_case (a-z, 0-9, _)", where=where)
        check_choice(self.track, "track", TRACKS, error=BadInput, where=f"{where}.track")
        if not isinstance(self.kind, str) or not _NAME.match(self.kind):  # which kinds exist: builders.source_kinds
            raise BadInput(f"kind must be a source kind's snake_case name, got {self.kind!r}", where=f"{where}.kind")
        check_choice(self.modality, "modality", MODALITIES, error=BadInput, where=f"{where}.modality")
        if not isinstance(self.options, dict):
            raise BadInput("options must be a mapping", where=where)
        if not isinstance(self.description, str) or len(self.description) > 2000:
            raise BadInput("must be text of at most 2000 characters", where=f"{where}.description")
        object.__setattr__(self, "license", spdx_license(self.license, where=f"{where}.license"))
        object.__setattr__(self, "citation", check_citation(self.citation, where=f"{where}.citation"))
        object.__setattr__(self, "homepage", check_homepage(self.homepage, where=f"{where}.homepage"))


@dataclass(frozen=True)
class BuildParams(Declared, where="params.yaml: build"):
    """How the dataset is built (``params.yaml: build``)."""

    rows_per_shard: int = param(16, lo=1, unit="rows", doc="rows per parquet shard")
    workers: int = param(1, lo=1, unit="processes", doc="build processes")
    conditions: tuple[str, ...] = param((), doc="condition configs beyond clean (\"all\" = every one)")
    compound: tuple[str, ...] = param((), doc="compound configs, e.g. low_light_s2+inundation_s2")
    geometry: str = param("frame", type=object, choices=GEOMETRIES,
                          doc="pixel-unit corruption parameters per 1000 px of the frame, or of the median target")
    severity_table: str | None = param(None, doc="fitted table written by `aegisbench calibrate --fit`")
    withhold_labels: tuple[str, ...] = param((), doc="splits built without boxes (their labels go to "
                                                     "paths.private_labels)")


#: Seed 000's global sanity check: a = 0.001 .. 0.400 in steps of 0.001, 400 levels (its Fig. 5).
SEED000_NOISE_LEVELS = {"start": 0.001, "stop": 0.4, "step": 0.001}
#: The default sweep: 0.02 .. 0.40 in steps of 0.02 plus the seed's headline level 0.21 (21 levels).
DEFAULT_NOISE_LEVELS = tuple(sorted({k / 50 for k in range(1, 21)} | {0.21}))


def _thousandths(v, where: str) -> int:
    """``v`` (a number in [0, 1] and a multiple of 0.001: a level names its results config
    ``warp_noise_<thousandths>``) in thousandths."""
    if not is_finite_number(v) or not 0.0 <= v <= 1.0:
        raise BadInput(f"a noise level must be a number in [0, 1], got {v!r}", where=where)
    k = round(float(v) * 1000)
    if abs(k - float(v) * 1000) > 1e-6:
        raise BadInput(f"a noise level must be a multiple of 0.001 (results name it warp_noise_<thousandths>), "
                       f"got {v!r}", where=where)
    return k


def _range_levels(start, stop, step, where: str) -> list[int]:
    lo, hi, dk = (_thousandths(v, where) for v in (start, stop, step))
    if dk < 1:
        raise BadInput(f"step must be a positive multiple of 0.001, got {step!r}", where=where)
    if hi < lo:
        raise BadInput(f"stop {stop!r} is below start {start!r}: the levels must increase", where=where)
    return list(range(lo, hi + 1, dk))


def noise_levels(spec, where: str = "params.yaml: warp.noise_levels") -> tuple[float, ...]:
    """WARP global-noise levels from a list of numbers, a ``{start, stop, step}`` mapping
    (stop included) or text (``"0.02,0.1,0.21"`` or ``"start:stop:step"``); BadInput naming
    ``where`` unless they are strictly increasing multiples of 0.001 in [0, 1]."""
    if isinstance(spec, str):
        text = spec.replace(" ", "")
        try:
            parts = [float(x) for x in text.split(":" if ":" in text else ",")]
        except ValueError:
            raise BadInput(f"expected numbers separated by ',' or start:stop:step, got {spec!r}", where=where) from None
        if ":" in text and len(parts) != 3:
            raise BadInput(f"a range is start:stop:step, got {spec!r}", where=where)
        spec = dict(zip(("start", "stop", "step"), parts)) if ":" in text else parts
    if isinstance(spec, Mapping):
        if set(spec) != {"start", "stop", "step"}:
            raise BadInput(f"a range needs exactly start, stop and step, got {sorted(spec)}", where=where)
        ks = _range_levels(spec["start"], spec["stop"], spec["step"], where)
    elif isinstance(spec, (list, tuple)) and spec:
        ks = [_thousandths(v, where) for v in spec]
    else:
        raise BadInput(f"must be a non-empty list of levels or a {{start, stop, step}} range, got {spec!r}",
                       where=where)
    for i in range(1, len(ks)):
        if ks[i] <= ks[i - 1]:
            raise BadInput(f"must be strictly increasing: {ks[i] / 1000:g} (entry {i}) follows "
                           f"{ks[i - 1] / 1000:g}", where=where)
    return tuple(k / 1000 for k in ks)


def patch_images(v, where: str = "params.yaml: warp.images") -> int | None:
    """Images of the patch test per source: a positive integer, or ``all`` (None)."""
    if v is None or v == "all":
        return None
    return check_int(v, "images", lo=1, error=BadInput, where=where)


@dataclass(frozen=True)
class WarpTestParams(Declared, where="params.yaml: warp"):
    """WARP (seed 000) on the smoke track (``params.yaml: warp``), run by ``aegisbench
    warp-detect`` on the clean test frames of the smoke sources; the dataset stores none of it.

    ``noise_levels``: the global sanity check's levels ``a``, each over every smoke test
    frame with the noise added to the model's input tensor; ``grid``: the patch test's
    grid side (``grid**2`` positions); ``images``: smoke-positive test frames per source
    the patch test runs on, a seeded subsample (None: every one, as seed 000)."""

    noise_levels: tuple[float, ...] = param(DEFAULT_NOISE_LEVELS, doc="levels a of the global sanity check: "
                                                                      "multiples of 0.001 in [0, 1], increasing")
    grid: int = param(WARP_GRID, lo=1, unit="cells per side", doc="grid side of the patch test")
    images: int | None = param(None, doc="smoke-positive test frames per source of the patch test "
                                         "(a positive integer; None or all: every one)")

    def cross_check(self) -> None:
        object.__setattr__(self, "noise_levels", noise_levels(tuple(self.noise_levels)))
        patch_images(self.images)

    @classmethod
    def from_dict(cls, raw, where: str = "params.yaml: warp") -> "WarpTestParams":
        if raw is None:
            return cls()
        if isinstance(raw, dict) and "max_images" in raw:
            raise BadInput("renamed warp.images (smoke-positive test frames per source of the patch test; "
                           "all: every one)", where=f"{where}.max_images")
        raw = cls.mapping_of(raw, where)
        levels = noise_levels(raw["noise_levels"], f"{where}.noise_levels") if "noise_levels" in raw else None
        return cls(noise_levels=levels or DEFAULT_NOISE_LEVELS, grid=raw.get("grid", WARP_GRID),
                   images=patch_images(raw.get("images"), f"{where}.images"))


@dataclass(frozen=True)
class Params:
    benchmark_version: str
    sources: tuple[SourceParams, ...]
    build: BuildParams = BuildParams()
    sources_dir: str = paths_.SOURCES
    dataset_dir: str = paths_.DATASET
    private_labels_dir: str | None = None  # the private label repo of withheld splits (paths.private_labels)
    firespread: "FirespreadParams | None" = None  # the fire-spread track's ensembles (None: not built)
    warp: WarpTestParams = WarpTestParams()  # WARP on the smoke track (run at detection time, not built)
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not _SEMVER.match(str(self.benchmark_version)):
            raise BadInput(f"benchmark_version {self.benchmark_version!r} is not semantic "
                           "(MAJOR.MINOR.PATCH)", where="params.yaml")
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise BadInput("duplicate source names", where="params.yaml: sources")

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "Params":
        if not isinstance(raw, dict) or "benchmark_version" not in raw:
            raise BadInput("missing benchmark_version", where="params.yaml")
        sources = []
        for name, spec in (raw.get("sources") or {}).items():
            if not isinstance(spec, dict):
                raise BadInput("must be a mapping", where=f"params.yaml: sources.{name}")
            known = {"track", "kind", "options", "license", "citation", "description", "modality", "homepage"}
            extra = set(spec) - known
            if extra:
                raise BadInput(f"unknown keys {sorted(extra)}", where=f"params.yaml: sources.{name}")
            sources.append(SourceParams(name=name, **spec))
        b = dict(raw.get("build") or {})
        if "warp_noise_levels" in b:  # moved in 0.6.0: the sweep is no longer built into the dataset
            raise BadInput("moved to warp.noise_levels: WARP global noise is now swept at detection time "
                           "(aegisbench warp-detect) on the clean smoke test frames, and the dataset stores no "
                           "warp_noise configs", where="params.yaml: build.warp_noise_levels")
        for key in ("conditions", "compound", "withhold_labels"):
            b[key] = tuple(b.get(key) or ())
        try:
            build = BuildParams(**b)
        except TypeError as exc:
            raise BadInput(str(exc), where="params.yaml: build") from None
        paths = raw.get("paths") or {}
        fs = raw.get("firespread")
        if fs is not None and not isinstance(fs, dict):
            raise BadInput("must be a mapping", where="params.yaml: firespread")
        firespread = None
        if fs is not None and fs.get("enabled", True) is not False:
            from aegisbench.params.firespread import FirespreadParams
            firespread = FirespreadParams.from_dict({k: v for k, v in fs.items() if k != "enabled"})
        return cls(benchmark_version=str(raw["benchmark_version"]), sources=tuple(sources),
                   build=build, sources_dir=paths.get("sources", paths_.SOURCES),
                   dataset_dir=paths.get("dataset", paths_.DATASET), private_labels_dir=paths.get("private_labels"),
                   firespread=firespread, warp=WarpTestParams.from_dict(raw.get("warp")), raw=raw)

    @classmethod
    def load(cls, path: str | Path = paths_.PARAMS) -> "Params":
        return cls.from_dict(read_yaml(path, "params file"))

    def source(self, name: str) -> SourceParams:
        for s in self.sources:
            if s.name == name:
                return s
        raise BadInput(f"unknown source {name!r}", where="params.yaml: sources")

    def select_tracks(self, tracks, where: str = "--tracks") -> "Params":
        """These params building only ``tracks`` (None: all): the sources of other tracks left
        out, the fire-spread ensembles only with ``firespread``. BadInput (naming ``where``) for
        an unknown track or when nothing is left to build."""
        if tracks is None:
            return self
        tracks = tuple(tracks)
        for t in tracks:
            check_choice(t, "track", TRACKS, error=BadInput, where=where)
        sources = tuple(s for s in self.sources if s.track in tracks)
        firespread = self.firespread if FIRESPREAD in tracks else None
        if not sources and firespread is None:
            raise BadInput(f"nothing to build: no source on tracks {list(tracks)}"
                           + ("" if FIRESPREAD not in tracks else " and no firespread section"), where=where)
        raw = dict(self.raw, sources={k: v for k, v in (self.raw.get("sources") or {}).items()
                                      if k in {s.name for s in sources}})
        if firespread is None:
            raw["firespread"] = None
        return replace(self, sources=sources, firespread=firespread, raw=raw)

    def digest(self) -> str:
        """Hash of the parameters that decide built bytes: the version, the sources, the
        build section (not its worker count) and the fire-spread section. Sections that
        only drive later stages (reference detector, submissions) do not enter it."""
        raw = {k: self.raw.get(k) for k in DATASET_SECTIONS}
        raw["build"] = {k: v for k, v in (raw.get("build") or {}).items() if k != "workers"}
        return json_sha256(raw)
