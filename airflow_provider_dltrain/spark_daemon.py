"""Spark's Python worker daemon for local sessions, importing PySpark as an installed package.

Spark starts its Python workers with ``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip first
on ``PYTHONPATH``. With PySpark installed by pip those zips are copies of the package beside them,
but Python compiles a module imported from a zip from source every time (no bytecode is cached
there), and every ``importlib.invalidate_caches()`` - which a worker calls for each task that adds
Spark files - reads the zips' directories again. Measured on the demo: about 6 s of CPU in the
workers of one date. Spark's own setting ``spark.python.daemon.module`` names this module for local
sessions (see :func:`~airflow_provider_dltrain.etl.spark.spark_session`); it drops the zips from
``sys.path`` when they belong to the PySpark installation that is importable without them (same
directory, same py4j version), then runs PySpark's daemon. Forked workers inherit that path.

It also imports the modules named in ``$DLTRAIN_SPARK_WORKER_PRELOAD`` (comma-separated) before it
forks any worker, so that each worker has them already: scoring asks for ``torch`` (about 2.5 s of
CPU in every worker otherwise) through :func:`~airflow_provider_dltrain.etl.spark.worker_preload`.
Spark keeps one daemon, and one pool of idle workers, per set of worker environment variables, so
workers with torch serve scoring and the others the rest. PySpark's daemon imports nothing before it
forks because some libraries start threads on import; torch starts none, and numpy's OpenBLAS
thread (torch imports numpy) is fork-safe (its at-fork handlers restart it), as every PyTorch
``DataLoader`` that forks its workers relies on. Otherwise only the standard library is imported here.
"""

from __future__ import annotations

import os
import sys


def own_zips(path: list[str], spark_home: str | None) -> list[str]:
    """The entries of ``path`` that are ``spark_home``'s zips of a package importable from the rest of it."""
    import importlib.metadata
    from importlib.machinery import PathFinder

    if not spark_home:
        return []
    lib = os.path.realpath(os.path.join(spark_home, "python", "lib"))
    zips = [p for p in path if p.endswith(".zip") and os.path.dirname(os.path.realpath(p)) == lib]
    if not zips:
        return []
    rest = [p for p in path if p not in zips]
    spec = PathFinder.find_spec("pyspark", rest)
    if spec is None or not spec.origin:
        return []
    if os.path.realpath(os.path.join(os.path.dirname(spec.origin), "python", "lib")) != lib:
        return []  # another PySpark: the zips are what Spark ships, keep them
    for zip_path in zips:
        name = os.path.basename(zip_path)
        if name.startswith("py4j-"):
            version = name[len("py4j-") :].removesuffix("-src.zip").removesuffix(".zip")
            try:
                installed = importlib.metadata.version("py4j")
            except importlib.metadata.PackageNotFoundError:
                return []
            if installed != version or PathFinder.find_spec("py4j", rest) is None:
                return []
    return zips


PRELOAD_ENV = "DLTRAIN_SPARK_WORKER_PRELOAD"


def preload(names: str) -> None:
    """Import each module of the comma-separated ``names``; one that is missing is the worker's to report."""
    import importlib

    for name in filter(None, (n.strip() for n in names.split(","))):
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def main() -> None:
    dropped = set(own_zips(sys.path, os.environ.get("SPARK_HOME")))
    if dropped:
        sys.path[:] = [p for p in sys.path if p not in dropped]
    preload(os.environ.get(PRELOAD_ENV, ""))
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
