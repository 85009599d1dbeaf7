"""Ship a training job to other processes: by reference where importable, by value where not."""

from __future__ import annotations

import sys
from typing import Any


def _cloudpickle() -> Any:
    try:
        import cloudpickle
    except ImportError:  # pyspark vendors one; either is fine for our own payloads
        from pyspark import cloudpickle  # type: ignore[no-redef]
    return cloudpickle


def _importable(module_name: str) -> bool:
    """Whether a fresh interpreter could import the module (``sys.modules`` deliberately not consulted)."""
    from importlib.machinery import PathFinder

    if module_name == "__main__":
        return False
    top = module_name.partition(".")[0]
    if top in sys.builtin_module_names:
        return True
    try:
        return PathFinder.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def dumps(obj: Any, *functions: Any) -> bytes:
    """Pickle ``obj``; the modules of ``functions`` go by value when a fresh process could not import them.

    That covers functions defined in an Airflow DAG file (loaded under a synthetic module name) and
    in notebooks; functions of installed packages stay references.
    """
    cp = _cloudpickle()
    registered = []
    for function in functions:
        name = getattr(function, "__module__", None)
        module = sys.modules.get(name or "")
        if module is not None and name != "__main__" and not _importable(name or ""):
            cp.register_pickle_by_value(module)
            registered.append(module)
    try:
        return bytes(cp.dumps(obj))
    finally:
        for module in registered:
            cp.unregister_pickle_by_value(module)


def loads(payload: bytes) -> Any:
    """Inverse of :func:`dumps`."""
    return _cloudpickle().loads(payload)
