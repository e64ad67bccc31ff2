"""Per-image strata of the detection tracks (``aegisbench evaluate --stratify COLUMN``).

For each stratified meta column (``SplitGT.strata``), every condition row of a (source,
config) is repeated per value ``v`` with ``stratum = "COLUMN=v"`` (images whose meta
lacks the column: ``COLUMN=(none)``). A stratum is scored on its own images at the
threshold frozen on **all** clean validation images, with percentile bootstrap intervals
over the stratum's images: one draw per stratum (key ``(..., "stratum", label)``), shared
by its conditions as the split's draw is. Strata come from the clean test split; a
condition is paired with the clean images of the same stratum. The validation rows, the
time-to-detect and WARP patch tables and ``effectiveness.json`` are not stratified; the
headline rows keep ``stratum`` null.

>>> stratum_label("time", "night"), stratum_label("time", None)
('time=night', 'time=(none)')
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from aegisbench.errors import BadInput
from aegisbench.evaluation.bootstrap import Resamples
from aegisbench.evaluation.scoring import ConditionScorer
from aegisbench.vocab import CLEAN

log = logging.getLogger(__name__)

NONE_VALUE = "(none)"


def stratum_label(column: str, value: str | None) -> str:
    """``COLUMN=value`` (``COLUMN=(none)`` for images without the column)."""
    return f"{column}={NONE_VALUE if value is None else value}"


def meta_columns(index, sources: Sequence[str]) -> list[str]:
    """Meta columns of the clean test and val splits of ``sources``, sorted."""
    cols = set()
    for source in sources:
        for split in (source, f"{source}_val"):
            if index.split_info(CLEAN, split) is not None:
                cols.update(index.gt(CLEAN, split).meta_columns())
    return sorted(cols)


def check_columns(index, sources: Sequence[str], columns: Sequence[str]) -> None:
    """BadInput (``--stratify``) for a column no image of ``sources`` has, naming those that exist."""
    if not columns:
        return
    have = meta_columns(index, sources)
    for col in columns:
        if col not in have:
            raise BadInput(f"unknown meta column {col!r}; the dataset's meta columns: {', '.join(have) or 'none'}",
                           where="--stratify")


def strata_of(gt, columns: Sequence[str]) -> list[tuple[str, np.ndarray]]:
    """``(label, image positions)`` of every stratum of ``gt``, column by column, values
    sorted and ``(none)`` last."""
    out = []
    for col in columns:
        vals = gt.strata(col).tolist()
        present = sorted({v for v in vals if v is not None})
        for v in present + ([None] if None in vals else []):
            out.append((stratum_label(col, v), np.flatnonzero([x == v if v is not None else x is None
                                                               for x in vals])))
    return out


class StrataScorers:
    """One :class:`ConditionScorer` per stratum of the clean test split of one source,
    fed the SplitScores of the configs (clean first). No columns: nothing happens."""

    def __init__(self, sub, index, source: str, threshold: float, params, key: tuple, clean_gt,
                 columns: Sequence[str]):
        self.columns = tuple(columns)
        self.scorers: dict[str, ConditionScorer] = {}
        self.clean: dict[str, object] = {}  # label -> the stratum's clean SplitScore
        self.n_images: dict[str, int] = {}
        for label, pos in strata_of(clean_gt, self.columns):
            k = (*key, "stratum", label)
            scorer = ConditionScorer(sub, index, source, threshold, params,
                                     Resamples.draw(len(pos), k, params.bootstrap.n_resamples), k)
            scorer.stratum = label
            self.scorers[label] = scorer
            self.n_images[label] = len(pos)

    def score_config(self, score, paired: bool) -> None:
        """Rows of every stratum of one config (``paired``: its images are clean's, in clean's order)."""
        for label, pos in strata_of(score.gt, self.columns) if self.scorers else ():
            scorer = self.scorers.get(label)
            if scorer is None:  # a value the clean test split does not have
                log.warning("%s/%s: stratum %s is not in the clean test split; not scored",
                            score.gt.source, score.config, label)
                continue
            part = score.subset(pos)
            if score.config == CLEAN:
                self.clean[label] = part
            scorer.score_config(part, self.clean[label] if paired else None)

    def with_clean(self) -> list[tuple[ConditionScorer, object]]:
        """``(scorer, clean SplitScore)`` of every stratum."""
        return [(self.scorers[k], self.clean[k]) for k in self.scorers if k in self.clean]

    @property
    def rows(self) -> list[dict]:
        return [r for s in self.scorers.values() for r in s.rows]

    @property
    def degenerate(self) -> list[dict]:
        return [d for s in self.scorers.values() for d in s.degenerate]

    def summary(self) -> dict | None:
        """Images per stratum of the clean test split (None when not stratified)."""
        return dict(self.n_images) if self.columns else None


def strata_provenance(columns: Sequence[str], per_source: dict) -> dict:
    """The provenance record of a stratified evaluation."""
    return {"columns": list(columns), "images": per_source,
            "rule": "every condition row repeated per value of each column (stratum 'COLUMN=value', "
                    f"'COLUMN={NONE_VALUE}' for images without it), scored on that stratum's test images at the "
                    "threshold frozen on all clean val images; intervals: percentile bootstrap over the stratum's "
                    "images (one draw per stratum, shared by its conditions); headline rows keep stratum null"}
