"""The project's default paths, declared once: every command's default and ``params.yaml``'s
``paths:`` fall back to these, relative to the project root (the folder with ``dvc.yaml``).

The embedded default's dataset repo is built at ``./aegisbench`` in the project root, so the
design card's call works literally from there: ``datasets.load_dataset("aegisbench",
"low_light_s3")`` (``datasets`` takes a local folder of that name before a Hub id; the package
itself lives in ``src/aegisbench``, so ``import aegisbench`` still finds the package).

>>> DATASET, DIGEST, SOURCES
('aegisbench', 'data/aegisbench.digest.json', 'data/sources')
>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> _ = (root / "dvc.yaml").write_text("stages: {}\\n"); (root / "a" / "b").mkdir(parents=True)
>>> project_root(root / "a" / "b") == root.resolve()
True
"""

from __future__ import annotations

from pathlib import Path

#: The built Hugging Face dataset repo (card, shards, manifest).
DATASET = "aegisbench"
#: The dataset's identity (benchmark version and digest, no paths): the stages after the build depend on it.
DIGEST = "data/aegisbench.digest.json"
#: The canonical source tables.
SOURCES = "data/sources"
#: One folder per submission (predictions + submission.yaml).
SUBMISSIONS = "submissions"
#: One folder per scored submission (the long results table + provenance).
RESULTS = "results"
#: The built leaderboard (pages, tables, plots).
LEADERBOARD = "leaderboard"
#: The project's parameters.
PARAMS = "params.yaml"
#: The file that marks a project root.
PROJECT_MARKER = "dvc.yaml"


def project_root(start: str | Path | None = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: the working directory) that holds
    :data:`PROJECT_MARKER`; ``None`` outside any project."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_MARKER).is_file():
            return folder
    return None


def dataset_dir(start: str | Path | None = None) -> Path:
    """The project's dataset repo: :data:`DATASET` under :func:`project_root` of ``start``
    (the working directory's own ``aegisbench`` folder outside a project)."""
    root = project_root(start)
    return (root if root is not None else Path(start if start is not None else Path.cwd())) / DATASET
