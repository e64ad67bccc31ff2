"""The options many commands share, declared once with the project's default paths
(:mod:`aegisbench.paths`): ``--params``, ``--dataset``, ``--results``, ``--out``,
``--no-verify`` and ``--executor/--workers/--ray-address``. Each helper takes the command's
own help text (what the option means there) and any other argparse setting, and returns the
action; a parser or an argument group will do. The global options (-v/-q/--no-progress/
--progress-interval) are :func:`aegisbench.cli.add_global_options`. A CLI module: only
``cli.py`` and the ``commands`` modules import it (:func:`aegisbench.layering.is_cli`).

>>> import argparse
>>> p = argparse.ArgumentParser()
>>> _ = add_params_option(p), add_dataset_option(p), add_results_option(p, "the results folder")
>>> add_executor_options(p)
>>> vars(p.parse_args(["--workers", "2"]))
{'params': 'params.yaml', 'dataset': 'aegisbench', 'results': 'results', 'executor': None, 'workers': 2, 'ray_address': None}
"""

from __future__ import annotations

import argparse

from aegisbench.paths import DATASET, PARAMS, RESULTS

EXECUTOR_HELP = "local (default: processes on this machine) or ray (a Ray cluster)"
WORKERS_HELP = ("local worker processes (default build.workers); the CPUs of a local Ray started for --executor ray "
                "without --ray-address")
RAY_ADDRESS_HELP = "Ray cluster to join: auto or HOST:PORT (default: start a local Ray)"


def _add(p, flag: str, text: str, kwargs: dict) -> argparse.Action:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{flag} needs a help text")
    return p.add_argument(flag, help=text, **kwargs)


def add_params_option(p, text: str = "params file", **kwargs) -> argparse.Action:
    """``--params FILE``: the project's parameters (default :data:`~aegisbench.paths.PARAMS`)."""
    return _add(p, "--params", text, {"default": PARAMS, **kwargs})


def add_dataset_option(p, text: str = "dataset repo", **kwargs) -> argparse.Action:
    """``--dataset``: a built dataset repo (default :data:`~aegisbench.paths.DATASET`).

    >>> p = argparse.ArgumentParser()
    >>> _ = add_dataset_option(p, "the public repo", default=None)
    >>> p.parse_args([]).dataset is None
    True
    """
    return _add(p, "--dataset", text, {"default": DATASET, **kwargs})


def add_results_option(p, text: str, **kwargs) -> argparse.Action:
    """``--results DIR``: the results folder, one ``<id>/`` per submission (default
    :data:`~aegisbench.paths.RESULTS`)."""
    return _add(p, "--results", text, {"default": RESULTS, "metavar": "DIR", **kwargs})


def add_out_option(p, text: str, **kwargs) -> argparse.Action:
    """``--out``: what the command writes (no default here: each command says its own, or
    ``required=True``)."""
    return _add(p, "--out", text, kwargs)


def add_no_verify_option(p, text: str = "do not re-hash the dataset repo against its manifest") -> argparse.Action:
    """``--no-verify``: skip re-hashing the dataset repo."""
    return _add(p, "--no-verify", text, {"action": "store_true"})


def add_ray_address_option(p, text: str = RAY_ADDRESS_HELP) -> argparse.Action:
    """``--ray-address``: the Ray cluster to use (auto or HOST:PORT; default None)."""
    return _add(p, "--ray-address", text, {})


def add_executor_options(p, executor: str = EXECUTOR_HELP, workers: str = WORKERS_HELP) -> None:
    """``--executor``, ``--workers``, ``--ray-address`` of every command that runs on an executor
    (defaults None: the AEGISBENCH_* variables, then :meth:`aegisbench.executor.Executor.from_cli`'s);
    ``executor`` / ``workers``: the command's own words for the first two."""
    _add(p, "--executor", executor, {"metavar": "{local,ray}"})
    _add(p, "--workers", workers, {"type": int})
    add_ray_address_option(p)
