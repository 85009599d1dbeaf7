"""The provider's closed error hierarchy.

Engines (``lake``, ``etl``, ``training``, ``registry``, ``inference``) raise these and never import
Airflow. The Airflow layer maps :class:`DltrainUserError` to ``AirflowFailException`` (see
``utils/airflow_errors.py``) so a deterministic mistake does not burn retries, while
:class:`DltrainTransientError` propagates unchanged so Airflow's retries apply.
"""

from __future__ import annotations


class DltrainError(Exception):
    """Base class of every error raised by this provider."""


class DltrainUserError(DltrainError):
    """Deterministic misuse: bad spec, bad input or bad schema. Retrying cannot help."""


class InvalidSpecError(DltrainUserError, ValueError):
    """A parameter is missing or malformed; the message names the field and what to do."""


class InvalidPartitionError(InvalidSpecError):
    """A partition value is empty, missing or contains characters that could widen a predicate."""


class SchemaMismatchError(DltrainUserError):
    """The data's schema conflicts with the table's, or an input lacks columns the transform needs.

    The message names the table or input file and the columns: those expected and those present.
    """


class NoFilesMatchedError(DltrainUserError):
    """An input's glob matches no file where the input points; the message names the glob and the path."""

    @classmethod
    def at(cls, where: str, glob: str, others: list[str]) -> NoFilesMatchedError:
        """The error for ``glob`` at ``where``, naming a few of the ``others`` files found there instead."""
        there = (
            f"{len(others)} other file(s) there, e.g. {', '.join(others[:3])}" if others else "no file there"
        )
        return cls(
            f"no file matched {glob!r} at {where} ({there}). Check the input's path or pathGlobFilter "
            "against the names of the landed files; retrying cannot help."
        )


class LandingFileError(DltrainUserError):
    """A landed raw file cannot be read safely as a whole: a line over the input's ``max_line_bytes``,
    or a symbolic link (or other non-regular file) given as the input's path.

    The message names the file, the line number and the limit where one applies; it never holds
    the file's content or where a link points.
    """


class BadDataError(DltrainUserError):
    """Too many input rows were rejected; nothing was committed.

    :ivar rejected: rows rejected, of ``total`` (0 when the refusal was not about rejected rows).
    :ivar reasons: rejected rows per reason.
    :ivar example: one rejected row as a JSON preview, when it could be read back.
    """

    def __init__(
        self,
        message: str,
        *,
        rejected: int = 0,
        total: int = 0,
        reasons: dict[str, int] | None = None,
        example: str | None = None,
    ) -> None:
        super().__init__(message)
        self.rejected, self.total = rejected, total
        self.reasons = dict(reasons or {})
        self.example = example


class TableNotFoundError(DltrainUserError):
    """The Delta table (or the requested version) does not exist."""


class HistoryGoneError(TableNotFoundError):
    """A pinned version, or the facts of a partition's last write, can no longer be read as they were.

    Log retention or a VACUUM removed what they need, and no readable version is proven to give the
    same answer (rows, schema, recorded facts). The message names the version, what is gone, what
    differs and what to do; nothing is recomputed into a different answer.
    """


class UnsafeModelError(DltrainUserError):
    """A model would run code while loading (pickle format, bundled code) and was not allowed to."""


class NonFiniteError(DltrainUserError):
    """A training metric or a model's output is NaN or infinite, and that was not allowed."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class DltrainTransientError(DltrainError):
    """A failure that may succeed on retry (a commit conflict, a lost worker, a network error)."""


class StorageReadError(DltrainTransientError, OSError):
    """A file of a table's log or history could not be read (not "it does not exist")."""


class InputNotFoundError(DltrainTransientError):
    """A raw input path of an ETL task does not exist (yet): retried, since data often lands late."""


class CommitConflictError(DltrainTransientError):
    """A concurrent writer changed the same partition; this attempt committed nothing."""


class ReapFailedError(DltrainTransientError):
    """Some leaked cloud resources could not be stopped; the message lists them and the service's errors."""


class ExtraTrackingError(DltrainTransientError):
    """A tracking target beside MLflow (W&B) failed and its spec says ``required``; retried as an outage."""


class TrainingFailedError(DltrainError):
    """A training worker failed; the message carries the failing rank's traceback."""


def require(module: str, extra: str):
    """Import ``module`` or raise :class:`MissingExtraError` naming the extra that provides it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f"{module!r} is not installed: pip install 'airflow-provider-dltrain[{extra}]'"
        ) from err
