"""Sources -> canonical source tables: the ``sources`` stage.

:func:`materialize_source` writes ``<paths.sources>/<name>.parquet`` (atomic) and a JSON
report for one source of ``params.yaml``: the embedded synthetic generators
or a local folder in a known format (through :mod:`aegisbench.builders.adapters`): the kinds
registered in :mod:`aegisbench.builders.source_kinds`. The build
(:mod:`aegisbench.builders.build`) only reads these tables, so the generators and format
adapters are not part of the code that decides the built bytes from them.

>>> import tempfile
>>> from aegisbench.params import Params
>>> params = Params.from_dict({"benchmark_version": "0.1.0", "sources": {"demo": {
...     "track": "sar", "kind": "synthetic_sar",
...     "options": {"n_train": 0, "n_val": 1, "n_test": 1, "small_size": [320, 320], "large_size": [640, 480]}}}})
>>> path = materialize_source(params.sources[0], "0.1.0", tempfile.mkdtemp())
>>> path.name, split_counts(path)["test"]
('demo.parquet', 1)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from aegisbench.atomic import atomic_write_text, atomic_write_with
from aegisbench.builders.source_kinds import SYNTHETIC_KINDS, SyntheticKind, check_source_kind
from aegisbench.builders.source_table import (SourceRecord, require_eval_splits, split_counts,
                                              write_source_table)
from aegisbench import isa
from aegisbench.errors import BadInput
from aegisbench.params import Params, SourceParams

log = logging.getLogger(__name__)


def source_records(src: SourceParams, version: str) -> tuple[Iterator[SourceRecord], Callable[[], dict]]:
    """Records of one source, and a function giving its report once they are consumed. The kind
    is a registered synthetic generator or folder format (:mod:`~aegisbench.builders.source_kinds`)."""
    check_source_kind(src.kind, where=f"params.yaml: sources.{src.name}.kind")
    if src.kind in SYNTHETIC_KINDS:
        kind = SYNTHETIC_KINDS.get(src.kind)
        return kind.generate(_config(kind, src), version), dict
    from aegisbench.builders.adapters import SourceSpec, stream_source
    stream = stream_source(SourceSpec.from_options(src.name, src.kind, src.options))
    return stream, lambda: stream.report.to_dict()


def _config(kind: SyntheticKind, src: SourceParams):
    options = dict(src.options)
    if options.pop("private", False) is True:  # a private variant: its draws keyed by a secret of private/
        from aegisbench.private import private_seed
        if not kind.private:
            able = " / ".join(n for n, k in SYNTHETIC_KINDS.items() if k.private)
            raise BadInput(f"private: true is supported by the {able} kind", where=f"params.yaml: sources.{src.name}")
        options.update(source=src.name, secret=private_seed(src.name, create=True))
    try:
        return kind.config(**options)
    except TypeError as exc:
        raise BadInput(str(exc), where=f"params.yaml: sources.{src.name}.options") from None


def materialize_source(src: SourceParams, version: str, out_dir: str | Path) -> Path:
    """Write one source's canonical table and its report; returns the table path. The table
    is published (atomically) only when it has val and test images
    (:func:`~aegisbench.builders.source_table.require_eval_splits`): else BadInput, nothing written."""
    isa.require(f"source table {src.name!r}")
    out_dir = Path(out_dir)
    records, report_of = source_records(src, version)
    path = out_dir / f"{src.name}.parquet"
    rows = []

    def write(tmp: Path) -> None:
        rows.append(write_source_table(records, tmp))
        require_eval_splits({src.name: tmp})

    atomic_write_with(path, write)
    report = {"source": src.name, "rows": rows[0], "splits": split_counts(path), **report_of()}
    atomic_write_text(out_dir / f"{src.name}.report.json", json.dumps(report, indent=2, sort_keys=True))
    log.info("source %s: %d images -> %s", src.name, rows[0], path)
    return path


def materialize_sources(params: Params, only: list[str] | None = None, missing_only: bool = False,
                        where: str = "params.yaml") -> list[Path]:
    """:func:`materialize_source` for every source of ``params`` (or those named in ``only``;
    with ``missing_only``, only those whose table does not exist yet); returns the tables
    written. An unknown name in ``only`` is BadInput naming ``where`` (the params file)."""
    unknown = sorted(set(only or ()) - {s.name for s in params.sources})
    if unknown:
        raise BadInput(f"unknown source(s) {unknown}", where=where)
    written = []
    for src in params.sources:
        if only and src.name not in only:
            continue
        if missing_only and (Path(params.sources_dir) / f"{src.name}.parquet").exists():
            continue
        written.append(materialize_source(src, params.benchmark_version, params.sources_dir))
    return written
