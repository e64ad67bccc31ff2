"""One results schema, one provenance record and one writer for every track.

``results/<id>/metrics.parquet`` is the long results table, one row per (source, config,
frame, stratum, metric), of :data:`RESULTS_SCHEMA`: the columns declared once, with their
meanings, in :mod:`aegisbench.results_schema` (which the leaderboard reads them by). Every
``metric`` value names a registered metric (:mod:`aegisbench.metrics`).

>>> [f.name for f in RESULTS_SCHEMA][-4:]
['t', 'stratum', 'n_units', 'note']
>>> results_table([]).num_rows
0
"""

from __future__ import annotations

import io
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import aegisbench
from aegisbench.atomic import writing
from aegisbench.staging import staged_dir
from aegisbench.evaluation.version import EVALUATOR_VERSION
from aegisbench.hashing import json_sha256
from aegisbench.results_schema import ARROW_SCHEMA, METRICS_FILE, PROVENANCE_FILE  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

#: the Arrow schema of every results table (:data:`aegisbench.results_schema.ARROW_SCHEMA`)
RESULTS_SCHEMA = ARROW_SCHEMA


def results_table(rows: list[dict]) -> pa.Table:
    """Rows (dicts; missing stratum columns are null) as a table of :data:`RESULTS_SCHEMA`."""
    return pa.Table.from_pylist(rows, schema=RESULTS_SCHEMA)


@dataclass(eq=False)
class Evaluation:
    """An evaluation in memory: the tables, JSON documents and binary files written under
    ``results/<id>/`` (``per_image`` is None for tracks without per-image rows)."""

    submission: object  # ValidatedSubmission
    metrics: pa.Table
    per_image: pa.Table | None
    provenance: dict
    tables: dict[str, pa.Table] = field(default_factory=dict)
    documents: dict[str, dict] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)

    def artefacts(self) -> list[str]:
        """Names of the files besides ``metrics.parquet``, ``per_image.parquet`` and the provenance."""
        return sorted([*self.tables, *self.documents, *self.blobs])


def provenance(sub, index, params, artefacts: list[str], **track_fields) -> dict:
    """The provenance record: who submitted what, against which dataset, scored by
    which evaluator with which settings; ``track_fields`` add what the track decided
    (frozen thresholds, interval units, configs scored)."""
    m = sub.meta
    common = {
        "submission": sub.id, "name": m.name, "team": m.team, "model": m.model, "track": m.track,
        "contact": m.contact, "license": m.license, "description": m.description,
        "dataset_version": index.version, "dataset_digest": index.digest,
        "evaluator_version": EVALUATOR_VERSION, "package_version": aegisbench.__version__,
        "params": params.as_dict(), "params_sha256": params.digest(),
        "prediction_form": sub.form, "submission_files": sub.files, "content_sha256": json_sha256(sub.files),
        "artefacts": artefacts,
    }
    if m.metadata:  # what the model is (paper, code, ...): shown and sortable on the leaderboard
        common["metadata"] = dict(m.metadata)
    if m.weights_sha256:  # the weights `detect` ran: with a pipeline run, the row is "verified"
        common["weights_sha256"] = m.weights_sha256
    kernels = recorded_kernels(m.extra)
    if kernels:  # the machine class the model ran on (aegisbench.kernels): the same string, the same rows
        common["kernels"] = kernels
    overlap = set(common) & set(track_fields)
    if overlap:
        raise ValueError(f"track provenance fields {sorted(overlap)} would overwrite common fields")
    return {**common, **track_fields}


def recorded_kernels(extra: dict) -> str | None:
    """The kernels ``submission.yaml`` says the model ran on: its detector record's ``kernels``
    (``detect``) or its own (the ConvLSTM); None when absent or not a short string.

    >>> recorded_kernels({"detector": {"kernels": "x86-64-v3, oneDNN off, MKL COMPATIBLE, 1 thread"}})
    'x86-64-v3, oneDNN off, MKL COMPATIBLE, 1 thread'
    >>> recorded_kernels({"kernels": ["not", "a string"]}) is None
    True
    """
    det = extra.get("detector")
    value = det.get("kernels") if isinstance(det, dict) else extra.get("kernels")
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None


def jsonable(obj):
    """``obj`` with numpy values made plain and non-finite floats made null."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if not math.isfinite(float(obj)) else float(obj)
    return obj


def _dump(doc) -> str:
    return json.dumps(jsonable(doc), indent=1, sort_keys=True) + "\n"


def write_results(ev: Evaluation, results_dir: str | Path) -> Path:
    """Write ``results/<id>/`` through a hidden staging folder swapped into place; a
    failure leaves nothing behind (an older result for the id stays untouched)."""
    final = Path(results_dir) / ev.submission.id
    tables = {METRICS_FILE: ev.metrics, **ev.tables}
    if ev.per_image is not None:
        tables["per_image.parquet"] = ev.per_image
    with staged_dir(final) as staging:  # (an out-of-room error names the file under final)
        for name, table in tables.items():
            with writing(staging / name):
                pq.write_table(table, staging / name, compression="zstd")
        for name, doc in {**ev.documents, PROVENANCE_FILE: ev.provenance}.items():
            with writing(staging / name):
                (staging / name).write_text(_dump(doc))
        for name, data in ev.blobs.items():
            with writing(staging / name):
                (staging / name).write_bytes(data)
    log.info("wrote %s (%d metric rows)", final, ev.metrics.num_rows)
    return final


def png_bytes(fig) -> bytes:
    """A matplotlib figure as PNG bytes (for :attr:`Evaluation.blobs`)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
