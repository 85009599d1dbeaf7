"""The transform contract: ``transform(spark, inputs: dict[str, DataFrame], params: dict) -> DataFrame``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

Transform = Callable[[Any, dict[str, Any], dict[str, Any]], Any]


def load_callable(target: Callable[..., Any] | str, *, field: str = "transform") -> Callable[..., Any]:
    """Accept a callable or a ``"package.module:function"`` path."""
    if callable(target):
        return target
    if not isinstance(target, str) or ":" not in target:
        raise InvalidSpecError(f"{field} must be a callable or 'package.module:function', got {target!r}")
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        raise InvalidSpecError(f"{field} {target!r} cannot be imported: {err}") from err
    if not callable(obj):
        raise InvalidSpecError(f"{field} {target!r} is not callable")
    return obj  # type: ignore[no-any-return]


def run_transform(
    spark: Any, transform: Transform | str, inputs: Mapping[str, Any], params: Mapping[str, Any]
) -> Any:
    """Call the user's transform and check that it returned a Spark DataFrame."""
    fn = load_callable(transform)
    out = fn(spark, dict(inputs), dict(params or {}))
    if not hasattr(out, "mapInArrow") or not hasattr(out, "schema"):
        raise InvalidSpecError(
            f"transform {getattr(fn, '__name__', fn)!r} must return a Spark DataFrame, got {type(out).__name__}"
        )
    return out
