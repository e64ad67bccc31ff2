"""A real Ray cluster on this machine for the tests (``ray.cluster_utils.Cluster``): a head and
``extra_nodes`` more raylets, one CPU and a small object store each, whose workers import this
checkout; torn down afterwards."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORE = 100_000_000  # bytes of object store per node: nothing large goes through it


@contextmanager
def ray_cluster(extra_nodes: int = 0):
    """Yield ``(cluster, [extra node handles])``."""
    import ray
    from ray.cluster_utils import Cluster
    if ray.is_initialized():
        ray.shutdown()
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests"), *([old] if old else [])])
    os.makedirs("/tmp/ray", exist_ok=True)  # where Ray records the current cluster's address
    temp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths have a length limit
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, object_store_memory=STORE,
                                                          include_dashboard=False, temp_dir=temp))
    try:
        nodes = [c.add_node(num_cpus=1, object_store_memory=STORE) for _ in range(extra_nodes)]
        if nodes:
            c.wait_for_nodes()
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
