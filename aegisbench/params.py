"""Typed view of ``params.yaml``: the single source of every build parameter.

>>> p = Params.from_dict({"benchmark_version": "1.2.3", "sources": {}})
>>> p.benchmark_version, p.build.rows_per_shard
('1.2.3', 16)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aegisbench.attribution import check_citation, check_homepage, spdx_license
from aegisbench.errors import BadInput
from aegisbench.fields import check_choice, check_int
from aegisbench.hashing import json_sha256
from aegisbench.readers import read_yaml
from aegisbench.vocab import FIRESPREAD, GEOMETRIES, MODALITIES, SOURCE_FORMATS, TRACKS

if TYPE_CHECKING:  # imported lazily at run time (the fire-spread package is optional work)
    from aegisbench.firespread.params import FirespreadParams

_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
SYNTHETIC_KINDS = ("synthetic_sar", "synthetic_smoke")
FORMAT_KINDS = SOURCE_FORMATS
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
        check_choice(self.kind, "kind", SYNTHETIC_KINDS + FORMAT_KINDS, error=BadInput, where=f"{where}.kind")
        check_choice(self.modality, "modality", MODALITIES, error=BadInput, where=f"{where}.modality")
        if not isinstance(self.options, dict):
            raise BadInput("options must be a mapping", where=where)
        if not isinstance(self.description, str) or len(self.description) > 2000:
            raise BadInput("must be text of at most 2000 characters", where=f"{where}.description")
        object.__setattr__(self, "license", spdx_license(self.license, where=f"{where}.license"))
        object.__setattr__(self, "citation", check_citation(self.citation, where=f"{where}.citation"))
        object.__setattr__(self, "homepage", check_homepage(self.homepage, where=f"{where}.homepage"))


@dataclass(frozen=True)
class BuildParams:
    rows_per_shard: int = 16
    workers: int = 1
    conditions: tuple[str, ...] = ()  # condition configs beyond ``clean`` ("all" = the 27)
    compound: tuple[str, ...] = ()  # e.g. "low_light_s2+inundation_s2"
    warp_noise_levels: tuple[float, ...] = ()  # WARP global-noise levels a (smoke track)
    geometry: str = "frame"
    severity_table: str | None = None  # fitted table written by `aegisbench calibrate --fit`
    withhold_labels: tuple[str, ...] = ()  # splits built without boxes (their labels go to paths.private_labels)

    def __post_init__(self) -> None:
        where = "params.yaml: build"
        check_int(self.rows_per_shard, "rows_per_shard", lo=1, error=BadInput, where=f"{where}.rows_per_shard")
        check_int(self.workers, "workers", lo=1, error=BadInput, where=f"{where}.workers")
        check_choice(self.geometry, "geometry", GEOMETRIES, error=BadInput, where=f"{where}.geometry")


@dataclass(frozen=True)
class Params:
    benchmark_version: str
    sources: tuple[SourceParams, ...]
    build: BuildParams = BuildParams()
    sources_dir: str = "data/sources"
    dataset_dir: str = "data/aegisbench"
    private_labels_dir: str | None = None  # the private label repo of withheld splits (paths.private_labels)
    firespread: "FirespreadParams | None" = None  # the fire-spread track's ensembles (None: not built)
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
        for key in ("conditions", "compound", "warp_noise_levels", "withhold_labels"):
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
            from aegisbench.firespread.params import FirespreadParams
            firespread = FirespreadParams.from_dict({k: v for k, v in fs.items() if k != "enabled"})
        return cls(benchmark_version=str(raw["benchmark_version"]), sources=tuple(sources),
                   build=build, sources_dir=paths.get("sources", "data/sources"),
                   dataset_dir=paths.get("dataset", "data/aegisbench"), private_labels_dir=paths.get("private_labels"),
                   firespread=firespread, raw=raw)

    @classmethod
    def load(cls, path: str | Path = "params.yaml") -> "Params":
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
