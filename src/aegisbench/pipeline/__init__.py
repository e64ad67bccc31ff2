"""The whole pipeline under ``dvc repro`` (``aegisbench run``).

:mod:`~aegisbench.pipeline.project` prepares and runs the DVC project (the checkout, or a
scratch copy on the fast variant of ``params.yaml``); :mod:`~aegisbench.pipeline.commands`
is the ``run`` command. Nothing in the library imports this package: it sits on top of
every stage and only drives ``dvc``.

>>> from aegisbench.pipeline import fast_params
>>> fast_params({"evaluation": {"n_resamples": 1000}})["evaluation"]["n_resamples"]
50
"""

from aegisbench.pipeline.project import (FAST_OVERRIDES, FAST_SOURCES, PAGE, check_runnable, dvc_repro,
                                         fast_params, prepare_project)

__all__ = ["FAST_OVERRIDES", "FAST_SOURCES", "PAGE", "check_runnable", "dvc_repro", "fast_params",
           "prepare_project"]
