"""Where a hosted leaderboard keeps its state, inside one benchmark project.

A project is a folder with ``params.yaml`` and the dataset repo it names (``paths.dataset``,
default ``aegisbench``); the pipeline's own results are in ``results/``. Hosting adds
``hosted/``:

* ``hosted/store/`` — what must never be lost, append-only and versioned with DVC
  (``hosted/store.dvc``): ``submissions/<id>/`` (each accepted upload, read-only, under the id the
  server assigned), ``results/<id>/`` (the evaluator's output) and ``ledger.jsonl`` (one line per
  scored submission: the board's revision);
* ``hosted/leaderboard/`` — the page the server shows (rebuilt after every scored submission);
* ``hosted/incoming/`` — uploads being checked (never visible to anyone);
* ``hosted/queue.sqlite3`` — the default database (teams, submissions, their log, the queue).

>>> p = HostedProject.__new__(HostedProject); p.root = Path("/srv/lb")
>>> str(p.store), str(p.default_db_url())
('/srv/lb/hosted/store', 'sqlite:////srv/lb/hosted/queue.sqlite3')
"""

from __future__ import annotations

import logging
from functools import cached_property
from pathlib import Path

from aegisbench.errors import BadInput
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.evaluation.evaluator import EvaluationParams
from aegisbench.fields import check_int
from aegisbench.paths import DATASET
from aegisbench.readers import read_yaml
from aegisbench.service.rules import HostingRules
from aegisbench.vocab import WARP_GRID

log = logging.getLogger(__name__)

HOSTED = "hosted"
DB_FILE = "queue.sqlite3"


class HostedProject:
    """The paths and settings of one hosted project (``root``: the project folder)."""

    def __init__(self, root: str | Path):
        self.root = Path(root).absolute()
        if not self.root.is_dir():
            raise BadInput("project folder not found", where=str(root))
        if not (self.root / "params.yaml").is_file():
            raise BadInput("no params.yaml: not a benchmark project (run `aegisbench run --fast` for a scratch "
                           "one, or give the checkout)", where=str(root))

    @cached_property
    def raw_params(self) -> dict:
        raw = read_yaml(self.root / "params.yaml", "params file")
        if not isinstance(raw, dict):
            raise BadInput("must be a mapping", where=str(self.root / "params.yaml"))
        return raw

    @cached_property
    def rules(self) -> HostingRules:
        return HostingRules.from_dict(self.raw_params.get("hosting"))

    @property
    def dataset(self) -> Path:
        rel = (self.raw_params.get("paths") or {}).get("dataset", DATASET)
        return self.root / rel

    @property
    def results(self) -> Path:
        """The pipeline's results (``results/<id>/`` of the ``evaluate`` stages)."""
        return self.root / "results"

    @property
    def private_labels(self) -> Path:
        """The private label repo of withheld test splits (``paths.private_labels``, default
        ``private/labels``)."""
        return self.root / (self.raw_params.get("paths") or {}).get("private_labels", "private/labels")

    @property
    def hosted(self) -> Path:
        return self.root / HOSTED

    @property
    def store(self) -> Path:
        return self.hosted / "store"

    @property
    def submissions(self) -> Path:
        return self.store / "submissions"

    @property
    def hosted_results(self) -> Path:
        return self.store / "results"

    @property
    def ledger(self) -> Path:
        return self.store / "ledger.jsonl"

    @property
    def incoming(self) -> Path:
        return self.hosted / "incoming"

    @property
    def leaderboard(self) -> Path:
        return self.hosted / "leaderboard"

    @property
    def site(self) -> Path:
        return self.leaderboard / "site"

    def default_db_url(self) -> str:
        return f"sqlite:///{self.hosted / DB_FILE}"

    def evaluation_params(self) -> EvaluationParams:
        """The evaluator settings of the project's own ``evaluate`` stages (bootstrap resamples
        from ``evaluation.n_resamples``, the WARP grid from ``warp.grid``), so a hosted row is
        scored exactly as a pipeline row."""
        ev = self.raw_params.get("evaluation") or {}
        warp = self.raw_params.get("warp") or {}
        n = check_int(ev.get("n_resamples", BootstrapParams().n_resamples), "n_resamples", lo=1,
                      error=BadInput, where="params.yaml: evaluation.n_resamples")
        grid = check_int(warp.get("grid", WARP_GRID), "grid", lo=1, error=BadInput, where="params.yaml: warp.grid")
        return EvaluationParams(bootstrap=BootstrapParams(n_resamples=n), warp_grid=grid)

    def make_dirs(self) -> None:
        for d in (self.submissions, self.hosted_results, self.incoming):
            d.mkdir(parents=True, exist_ok=True)
