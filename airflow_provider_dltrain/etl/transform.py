"""The transform contract: ``transform(spark, inputs: dict[str, DataFrame], params: dict) -> DataFrame``."""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_dltrain.exceptions import InvalidSpecError

Transform = Callable[[Any, dict[str, Any], dict[str, Any]], Any]


def load_callable(target: Callable[..., Any] | str, *, field: str = "transform") -> Callable[..., Any]:
    """The callable itself, or the one named by ``"package.module:function"`` (``pkgutil.resolve_name``).

    :param field: the parameter's name, put in front of every refusal.
    :raises InvalidSpecError: not such a name, the module does not import, it lacks the attribute,
        or the attribute is not callable.
    """
    if callable(target):
        return target
    if not isinstance(target, str) or ":" not in target:
        raise InvalidSpecError(
            f"{field} must be a callable or 'package.module:function', got {target!r:.200}"
        )
    name = target.strip()
    module_name, _, attr = name.partition(":")
    try:
        obj: Any = pkgutil.resolve_name(name)
    except ImportError as err:
        raise InvalidSpecError(f"{field} {target!r}: cannot import {module_name!r}: {err}") from err
    except AttributeError as err:
        raise InvalidSpecError(
            f"{field} {target!r}: module {module_name!r} has no attribute {attr!r} ({err})"
        ) from err
    except ValueError as err:
        raise InvalidSpecError(
            f"{field} {target!r} is not a valid 'package.module:function' name: {err}"
        ) from err
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
