"""Identities of a training run's inputs: code, hyper-parameters (and data, in ``data.fingerprint``).

Together with :func:`airflow_provider_dltrain.training.data.fingerprint` they answer "is this run's
input identical to the champion's?", so a nightly DAG can skip retraining when nothing changed.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace; tuples as lists, anything else as ``str``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)


def params_hash(hparams: Mapping[str, Any] | None) -> str:
    """sha256 of the canonical JSON of ``hparams`` (key order and whitespace do not matter)."""
    return hashlib.sha256(canonical_json(dict(hparams or {})).encode()).hexdigest()


def code_hash(train_fn: Callable[..., Any]) -> str:
    """sha256 of the source of the module that defines ``train_fn``, plus the function's name.

    The whole module counts, not just the function body: a change to the model class or a helper
    next to ``train_fn`` changes what gets trained. Without source (a REPL, a lambda built at run
    time) the compiled code object is hashed instead.
    """
    target = inspect.unwrap(train_fn)
    name = f"{getattr(target, '__module__', '')}:{getattr(target, '__qualname__', repr(target))}"
    digest = hashlib.sha256(name.encode())
    digest.update(b"\n")
    digest.update(_source(target).encode())
    return digest.hexdigest()


def _source(target: Any) -> str:
    module = sys.modules.get(getattr(target, "__module__", "") or "")
    for obj in (module, target):
        if obj is None:
            continue
        try:
            return inspect.getsource(obj)
        except (OSError, TypeError):
            continue
    code = getattr(target, "__code__", None)
    if code is None:
        return repr(target)
    return repr((code.co_code, code.co_consts, code.co_names, code.co_varnames))
