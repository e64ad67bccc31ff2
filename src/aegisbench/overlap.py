"""No command writes over its own inputs.

An output that *is* an input, *holds* one (replacing it would replace the input too) or
lies *inside* one (writing it would change the input) is refused before anything is
written: ``evaluate submissions/x --out submissions`` or ``leaderboard --out
aegisbench`` would otherwise be an operator's typo made total by the atomic
replace. Paths are compared after resolving links, so ``./results`` and a link to it
are one folder.

Commands declare which of their options they read and which they write
(:func:`declare_io` on the sub-parser); :func:`aegisbench.cli.main` checks them before
the command runs, and library entry points call :func:`refuse_overlap` themselves.

>>> refuse_overlap({"--out": "results"}, {"submission": "submissions/x"})
>>> try:
...     refuse_overlap({"--out": "submissions"}, {"submission": "submissions/x"})
... except ValueError as exc:
...     print(exc)
--out submissions: holds submission submissions/x; writing it would replace that input: give --out a place outside every input
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from aegisbench.errors import BadInput

PathLike = str | os.PathLike
IO_KEY = "_aegisbench_io"


def _real(path: PathLike) -> Path:
    return Path(os.path.realpath(os.fspath(path)))


def _listed(value) -> list[PathLike]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [value]
    return [v for v in value if v is not None]


def refuse_overlap(writes: Mapping[str, PathLike | Iterable[PathLike] | None],
                   reads: Mapping[str, PathLike | Iterable[PathLike] | None], into: Iterable[str] = ()) -> None:
    """Raise :class:`BadInput` naming the flag and both paths when an output is, holds or
    lies inside an input (or another output). ``into``: the outputs that are folders the
    command writes named files into, never replaces; those may hold an input.

    >>> refuse_overlap({"--out": "."}, {"--source-table": "s.parquet"}, into=["--out"])
    """
    into = set(into)
    ins = [(name, p, _real(p)) for name, value in reads.items() for p in _listed(value)]
    outs = [(name, p, _real(p)) for name, value in writes.items() for p in _listed(value)]
    for k, (oname, opath, oreal) in enumerate(outs):
        others = [(*i, True) for i in ins] + [(*o, False) for j, o in enumerate(outs) if j > k]
        for iname, ipath, ireal, is_input in others:
            if oreal == ireal:
                how = "is"
            elif ireal.is_relative_to(oreal):
                if oname in into:
                    continue
                how = "holds"
            elif oreal.is_relative_to(ireal):
                how = "lies inside"
            else:
                continue
            if not is_input:
                raise BadInput(f"{how} {iname} {ipath}, another output of the command: give them separate places",
                               where=f"{oname} {opath}")
            what = "replace" if how != "lies inside" else "change"
            raise BadInput(f"{how} {iname} {ipath}; writing it would {what} that input: give {oname} a place "
                           "outside every input", where=f"{oname} {opath}")


def declare_io(p: argparse.ArgumentParser, reads: Mapping[str, str], writes: Mapping[str, str],
               into: Iterable[str] = ()) -> None:
    """Declare the sub-command's inputs and outputs: ``{dest: shown name}`` each (the shown
    name is the flag, or the positional argument's name); ``into``: the dests of outputs
    that are folders the command writes named files into (see :func:`refuse_overlap`)."""
    p.set_defaults(**{IO_KEY: (dict(reads), dict(writes), tuple(into))})


def check_args(args: argparse.Namespace) -> None:
    """:func:`refuse_overlap` over what the parsed command declared with :func:`declare_io`."""
    declared = getattr(args, IO_KEY, None)
    if declared is None:
        return
    reads, writes, into = declared
    refuse_overlap({shown: getattr(args, dest, None) for dest, shown in writes.items()},
                   {shown: getattr(args, dest, None) for dest, shown in reads.items()},
                   into=[writes[dest] for dest in into])
