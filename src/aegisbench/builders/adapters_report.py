"""What reading a source found: the :class:`LoadReport` written beside its source table
(``<name>.report.json``) and the near-duplicate pairs of train/val and test images.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from aegisbench.builders.source_table import SourceRecord

#: what a train/val image nearly duplicating a test image does: leave train/val, or stay (reported)
NEAR_DUPLICATE_POLICIES = ("exclude", "report")


@dataclass(frozen=True)
class NearDuplicate:
    """A train/val image within the pHash distance of a test image (excluded or kept by the policy)."""

    image_id: str
    split: str
    test_id: str
    distance: int


@dataclass(frozen=True)
class LoadReport:
    source: str
    split_counts: dict  # split -> images kept
    box_counts: dict  # split -> boxes kept
    negative_counts: dict  # split -> kept images without boxes
    dropped_annotations: dict  # original class -> boxes whose class maps to None
    ignored_regions: int  # ignore regions kept (VisDrone 0 / score 0, crowd, difficult, "ignore")
    excluded: tuple[NearDuplicate, ...]
    straddling_groups: tuple[str, ...]  # folders / lists mode: groups found in several splits
    coordinate_base: int = 0  # the base the boxes were read with (VOC: detected or given)
    unlisted: int = 0  # lists mode: images in no split list (left out)
    meta_columns: tuple[str, ...] = ()  # per-image meta columns found
    near_duplicates: tuple[NearDuplicate, ...] = ()  # every pair found, excluded or kept
    near_duplicate_policy: str = "exclude"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["excluded"] = [asdict(e) for e in self.excluded]
        d["near_duplicates"] = [asdict(e) for e in self.near_duplicates]
        d["straddling_groups"] = list(self.straddling_groups)
        d["meta_columns"] = list(self.meta_columns)
        return d


@dataclass(frozen=True)
class SourceLoad:
    records: tuple[SourceRecord, ...]
    report: LoadReport
