"""The base of every engine's and backend's options class, and options as keyword arguments.

An options class is a frozen dataclass deriving :class:`Options`: its fields are the options, each
written once with its docstring line; its ``check()`` refuses a bad value naming the option, so an
object is checked - names and values - when it is built (for an operator: when the DAG is parsed).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from airflow_provider_dltrain.exceptions import InvalidSpecError

OptionsT = TypeVar("OptionsT", bound="Options")


class Options:
    """Base of every engine's and backend's options dataclass (frozen): built from a mapping, checked once."""

    def __post_init__(self) -> None:
        if hasattr(self, "staging_uri") and not self.staging_uri:
            raise InvalidSpecError(
                "option staging_uri is required: where the job's spec, code and result go (an s3:// "
                "prefix the job can read and write, e.g. 's3://my-bucket/dltrain')"
            )
        self.check()

    def check(self) -> None:
        """Refuse a bad value, naming the option and what to give (subclasses); normalise with :meth:`_set`."""

    def _set(self, **values: Any) -> None:
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @classmethod
    def of(cls: type[OptionsT], options: Any = None, *, what: str = "option", name: str = "") -> OptionsT:
        """``options`` as this class: an instance as it is; a mapping (or another dataclass) checked
        key by key, an unknown key or a missing one refused naming it and the valid ones."""
        if isinstance(options, cls):
            return options
        given = cls.known(options_dict(options), what=what, name=name)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        missing = [
            f.name
            for f in fields
            if f.name not in given
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise InvalidSpecError(f"{name or cls.__name__} needs {what} {', '.join(map(repr, missing))}")
        return cls(**given)

    @classmethod
    def known(cls, given: dict[str, Any], *, what: str = "option", name: str = "") -> dict[str, Any]:
        """``given`` with every key a field of this class; an unknown one refused naming it and the valid ones."""
        valid = sorted(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        place = f" for {what.split()[0]} {name!r}" if name else ""
        for key in sorted(given, key=str):
            if key not in valid:
                raise InvalidSpecError(f"unknown {what} {key!r}{place}; valid: {', '.join(valid)}")
        return given


def options_dict(options: Any) -> dict[str, Any]:
    """``options`` as keyword arguments: a mapping as it is, an options dataclass field by field."""
    if options is None:
        return {}
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    if isinstance(options, str):
        raise InvalidSpecError(f"options must be a mapping or an options object, not the text {options!r}")
    return dict(options)
