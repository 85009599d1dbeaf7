"""The transform contract: ``transform(spark, inputs: dict[str, DataFrame], params: dict) -> DataFrame``.

Landed files an input refused to read (links, hidden names, files over ``max_file_bytes``) never
reach the transform; :func:`run_transform` tags its result with them and the write quarantines each
with its reason, whatever the transform does (:func:`landing_refusals`).

A transform that finds its input unusable as a whole (a missing column, a wrong file) raises a
:class:`~airflow_provider_dltrain.exceptions.DltrainUserError` (:func:`require_columns` does it for
missing columns): the task then fails without retries, on the local engine and in a cloud job alike.
"""

from __future__ import annotations

import contextlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_provider_dltrain.etl.landing_files import REFUSED_ATTR, RefusedFile, refused_files
from airflow_provider_dltrain.exceptions import InvalidSpecError, SchemaMismatchError

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
    """Call the user's transform and check that it returned a Spark DataFrame.

    Spark's refusal of a column that does not exist (``UNRESOLVED_COLUMN``) becomes
    :class:`SchemaMismatchError` listing every input with its columns: the same input fails the
    same way on every try, so it must not be retried.
    """
    fn = load_callable(transform)
    try:
        out = fn(spark, dict(inputs), dict(params or {}))
    except Exception as err:
        if not _unresolved_column(err):
            raise
        first = str(err).split("\n", 1)[0].split(" SQLSTATE")[0]
        raise SchemaMismatchError(
            f"transform {getattr(fn, '__name__', fn)!r} refers to a column its input does not have: {first}. "
            f"Inputs: {'; '.join(_describe(name, df) for name, df in inputs.items())}. Fix the input files "
            "or the transform; retrying cannot help."
        ) from err
    if not hasattr(out, "mapInArrow") or not hasattr(out, "schema"):
        raise InvalidSpecError(
            f"transform {getattr(fn, '__name__', fn)!r} must return a Spark DataFrame, got {type(out).__name__}"
        )
    with contextlib.suppress(Exception):  # a DataFrame class that takes no attributes
        setattr(out, REFUSED_ATTR, landing_refusals(inputs))
    return out


def landing_refusals(inputs: Mapping[str, Any]) -> list[RefusedFile]:
    """The landed files every input refused to read (:func:`~.landing_files.refused_files`), once each.

    :func:`run_transform` tags its result with them, whatever the transform did, and
    :func:`~airflow_provider_dltrain.etl.writer.write_dataframe` quarantines them with their reasons.
    """
    found = {r.path: r for df in inputs.values() for r in refused_files(df)}
    return [found[path] for path in sorted(found)]


def _unresolved_column(err: Exception) -> bool:
    condition = getattr(err, "getCondition", None) or getattr(err, "getErrorClass", None)
    try:
        name = condition() if callable(condition) else None
    except Exception:  # an exception class of another pyspark version
        name = None
    return str(name or "").startswith("UNRESOLVED_COLUMN")


def _source(df: Any) -> tuple[str | None, str | None]:
    """``(input name, what it read)`` tagged by ``read_inputs``; else the files Spark read, if any."""
    from airflow_provider_dltrain.etl.inputs import SOURCE_ATTR

    tag = getattr(df, SOURCE_ATTR, None)
    if isinstance(tag, tuple) and len(tag) == 2:
        return tag[0], tag[1]
    try:
        files = list(df.inputFiles())
    except Exception:  # not a file-based DataFrame
        files = []
    return None, ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "") or None


def _describe(name: str, df: Any) -> str:
    where = _source(df)[1]
    try:
        columns = list(df.columns)
    except Exception:
        columns = []
    return f"{name!r}" + (f" ({where})" if where else "") + f" has {columns}"


def require_columns(df: Any, columns: Iterable[str], *, input_name: str | None = None) -> Any:
    """``df`` itself when it has every one of ``columns``; else :class:`SchemaMismatchError`.

    Call it in a transform before using an input's columns. The error names the input, the file(s)
    it read (the path and glob given to the operator), the columns it has and those expected; it
    is a user error, so Airflow does not retry it, on a cloud engine too. Names compare without
    regard to case, as Spark resolves them.

    :param input_name: the input's name, when ``df`` did not come from the ``inputs`` argument.
    """
    expected = list(columns)
    have = list(df.columns)
    present = {c.lower() for c in have}
    missing = [c for c in expected if c.lower() not in present]
    if not missing:
        return df
    tagged, where = _source(df)
    name = input_name or tagged
    what = (f"input {name!r}" if name else "an input") + (f" ({where})" if where else "")
    raise SchemaMismatchError(
        f"{what} has no column {', '.join(repr(c) for c in missing)}: its columns are {have}, the "
        f"transform expects {expected}. Fix the file (or the input's options, e.g. header or sep for "
        "csv); retrying cannot help."
    )
