"""Delta tables for the Airflow layer: storage options from an ``aws`` connection, and the one
predicate the version sensor and its triggers all call (maintenance commits never count).

Heavy modules (deltalake, pyarrow, boto3) load inside methods, so importing this module while a
DAG file is parsed costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider_dltrain.exceptions import InvalidSpecError
from airflow_provider_dltrain.lake.partition import Partition, validate_partition
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.lake.storage import StorageOptions, is_remote, normalize_uri, redact

if TYPE_CHECKING:
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    from airflow_provider_dltrain.lake.log import DeltaLog

NewerThan = DeltaRef | Mapping[str, Any] | str


@dataclass(frozen=True)
class VersionConditions:
    """What a Delta version must satisfy: validated, JSON-ready for trigger kwargs."""

    table_uri: str
    min_version: int | None = None
    partition: Partition | None = None
    newer_than: DeltaRef | None = None

    @classmethod
    def parse(
        cls,
        table_uri: str,
        min_version: int | None = None,
        partition: Mapping[str, object] | None = None,
        newer_than: NewerThan | None = None,
    ) -> VersionConditions:
        """Validate the conditions or raise :class:`InvalidSpecError` naming the field and the fix."""
        if not isinstance(table_uri, str) or not table_uri.strip():
            raise InvalidSpecError("table_uri is empty: pass a local path or an s3:// URI of a Delta table")
        uri = normalize_uri(table_uri.strip())
        if min_version is not None and (
            isinstance(min_version, bool) or not isinstance(min_version, int) or min_version < 0
        ):
            raise InvalidSpecError(f"min_version must be an integer >= 0 or None, got {min_version!r}")
        spec = validate_partition(partition) if partition is not None else None
        ref = _coerce_ref(newer_than) if newer_than is not None else None
        if ref is not None and normalize_uri(ref.uri) != uri:
            raise InvalidSpecError(
                f"newer_than refers to table {ref.uri} but the sensor watches {uri}: pass a DeltaRef of "
                "the watched table (e.g. the XCom of the task that last read it)"
            )
        return cls(uri, min_version, spec, ref)

    @property
    def floor(self) -> int:
        """The lowest version that can satisfy ``min_version`` and ``newer_than``."""
        return max(self.min_version or 0, self.newer_than.version + 1 if self.newer_than else 0)

    def describe(self) -> str:
        parts = []
        if self.min_version is not None:
            parts.append(f"version >= {self.min_version}")
        if self.newer_than is not None:
            parts.append(f"newer than version {self.newer_than.version}")
        if self.partition is not None:
            parts.append(f"partition {self.partition} present")
        return ", ".join(parts) or "any committed version"

    def to_kwargs(self) -> dict[str, Any]:
        return {
            "table_uri": self.table_uri,
            "min_version": self.min_version,
            "partition": dict(self.partition) if self.partition is not None else None,
            "newer_than": self.newer_than.to_dict() if self.newer_than is not None else None,
        }


@dataclass(frozen=True)
class VersionCheck:
    """One look at the table: its newest version and the conditions its newest data change does not meet.

    ``latest`` is the newest commit of any kind; ``ref`` (set only when every condition is met) is
    the newest commit that changed data, which maintenance commits after it (VACUUM, OPTIMIZE, ...)
    never replace.
    """

    conditions: VersionConditions
    latest: int | None
    unmet: tuple[str, ...] = ()
    ref: DeltaRef | None = None

    def summary(self) -> str:
        if self.ref is not None:
            after = (
                "" if self.ref.version == self.latest else f" (newest version {self.latest} is maintenance)"
            )
            return f"version {self.ref.version} meets {self.conditions.describe()}{after}"
        newest = "no table yet" if self.latest is None else f"newest version {self.latest}"
        return f"{newest}; unmet: {'; '.join(self.unmet)}"


class DeltaTableHook(BaseHook):
    """Reach Delta tables on local disk or S3 and find the newest version meeting a sensor's conditions.

    :param aws_conn_id: Amazon provider ``aws`` connection for ``s3://`` tables; ``None`` leaves
        credentials to delta-rs' own chain (environment, instance profile). Its extra may hold
        ``endpoint_url`` (an emulator), ``region_name``, ``delta_allow_unsafe_rename`` (emulators
        only: gives up protection against concurrent writers) and ``delta_storage_options`` (a
        dict passed to delta-rs, e.g. a locking provider).
    :param storage_options: delta-rs options applied on top of the connection's.
    """

    conn_name_attr = "aws_conn_id"
    default_conn_name = "aws_default"
    hook_name = "Delta table"

    def __init__(
        self, aws_conn_id: str | None = "aws_default", storage_options: Mapping[str, str] | None = None
    ) -> None:
        super().__init__()
        self.aws_conn_id = aws_conn_id
        self.storage_options: StorageOptions = dict(storage_options or {})
        self._aws_hook: AwsBaseHook | None = None

    # -- storage ----------------------------------------------------------------------------------
    def get_storage_options(self, table_uri: str) -> StorageOptions:
        """delta-rs storage options for ``table_uri``: none for local paths, AWS ones for ``s3://``."""
        if not is_remote(table_uri):
            return dict(self.storage_options)
        try:
            options = self._aws_storage_options() if self.aws_conn_id else {}
        except InvalidSpecError as err:
            raise InvalidSpecError(f"table {normalize_uri(table_uri)}: {err}") from err
        options.update(self.storage_options)
        self.log.debug("storage options for %s: %s", table_uri, redact(options))
        return options

    def _aws(self) -> AwsBaseHook:
        if self._aws_hook is None:  # one per hook: the connection is read once, credentials per call
            from airflow_provider_dltrain.exceptions import require

            base_aws = require("airflow.providers.amazon.aws.hooks.base_aws", "aws")
            self._aws_hook = base_aws.AwsBaseHook(aws_conn_id=self.aws_conn_id, client_type="s3")
        return self._aws_hook

    def _aws_storage_options(self) -> StorageOptions:
        from airflow_provider_dltrain.lake.storage import s3_storage_options

        hook = self._aws()
        config = hook.conn_config
        extra = config.extra_config or {}
        try:
            creds = hook.get_credentials()
        except AttributeError as err:  # botocore found no credentials at all and returned None
            raise InvalidSpecError(
                f"no AWS credentials for connection {self.aws_conn_id!r}: set its login/password, a role, "
                "or credentials in the environment"
            ) from err
        options = s3_storage_options(
            access_key=creds.access_key,
            secret_key=creds.secret_key,
            session_token=creds.token,
            region=config.region_name or hook.get_session().region_name,
            endpoint_url=config.get_service_endpoint_url("s3"),
            allow_unsafe_rename=_truthy(extra.get("delta_allow_unsafe_rename")),
        )
        passthrough = extra.get("delta_storage_options") or {}
        if not isinstance(passthrough, Mapping):
            raise InvalidSpecError(
                f"connection {self.aws_conn_id!r}: extra 'delta_storage_options' must be a JSON object"
            )
        options.update({str(k): str(v) for k, v in passthrough.items()})
        return options

    # -- the sensor's predicate -------------------------------------------------------------------
    def check_version(
        self,
        table_uri: str,
        min_version: int | None = None,
        partition: Mapping[str, object] | None = None,
        newer_than: NewerThan | None = None,
    ) -> VersionCheck:
        """Look once at the newest data change of the table and say which conditions it does not meet.

        Only commits that changed data count (:func:`~airflow_provider_dltrain.lake.log.changes_data`):
        a VACUUM, OPTIMIZE or table-property commit is never a new version to the sensor or the
        triggers, and the version handed on is the newest data change, which reads the same rows.
        Reads ``_last_checkpoint``, a few commit-file existence probes, the commits made since the
        last data change (or since the ``min_version``/``newer_than`` floor) and, for a partition
        condition, the commits since the checkpoint plus the checkpoint's partition columns: the
        cost does not grow with the length of the table's history.
        """
        from airflow_provider_dltrain.lake.log import DeltaLog

        conditions = VersionConditions.parse(table_uri, min_version, partition, newer_than)
        options = self.get_storage_options(conditions.table_uri)
        log = DeltaLog(conditions.table_uri, options)
        latest = log.latest_version()
        if latest is None:
            return VersionCheck(conditions, None, ("the table does not exist yet",))
        data = log.newest_data_version(latest, floor=conditions.floor)
        if data is None:  # every commit at or above the floor only maintained the table
            unmet = _version_unmet(conditions, conditions.floor - 1) or ("no commit has changed data yet",)
            return VersionCheck(conditions, latest, unmet)
        unmet = _version_unmet(conditions, data)
        # asked of ``latest``, not ``data``: maintenance keeps which partitions have files, and the
        # fast path reads from the newest checkpoint, which may lie above ``data``
        if not unmet and conditions.partition and not _partition_present(log, latest, conditions.partition):
            unmet = (f"partition {conditions.partition} has no file in version {latest}",)
        if unmet:
            return VersionCheck(conditions, latest, unmet)
        return VersionCheck(conditions, latest, (), log.ref(data))

    def find_version(
        self,
        table_uri: str,
        min_version: int | None = None,
        partition: Mapping[str, object] | None = None,
        newer_than: NewerThan | None = None,
    ) -> DeltaRef | None:
        """The newest version that changed data when it meets every condition, else ``None``.

        ``min_version`` and ``newer_than`` hold for the newest version whenever they hold for any;
        ``partition`` must have a live file in the newest version (a partition deleted since does
        not count).
        """
        return self.check_version(table_uri, min_version, partition, newer_than).ref

    def version_after(self, table_uri: str, after: int) -> tuple[VersionCheck, DeltaRef | None]:
        """The oldest version above ``after`` that changed data (``None`` if there is none), with the look
        at the newest.

        The same predicate as :meth:`check_version` (``min_version=after + 1``): the sensor asks it of
        the newest data change, the asset watcher walks the data changes one by one with it, skipping
        maintenance commits. ``check.ref is None`` with ``check.latest > after`` means every commit
        above ``after`` was maintenance.
        """
        from airflow_provider_dltrain.lake.log import DeltaLog

        check = self.check_version(table_uri, min_version=after + 1)
        if check.ref is None:
            return check, None
        if check.ref.version == after + 1:
            return check, check.ref
        log = DeltaLog(check.conditions.table_uri, self.get_storage_options(check.conditions.table_uri))
        return check, log.ref(log.oldest_data_version(after, check.ref.version))


def _coerce_ref(value: NewerThan) -> DeltaRef:
    """A ``DeltaRef`` from itself, its dict, its JSON, or the Python repr a Jinja template renders."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        import ast
        import json

        try:
            return DeltaRef.from_dict(json.loads(value))
        except json.JSONDecodeError:
            try:  # "{{ ti.xcom_pull(...) }}" renders a dict as its repr, with single quotes
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError) as err:
                raise InvalidSpecError(f"newer_than is not a DeltaRef dict: {value!r:.120}") from err
            if not isinstance(parsed, dict):
                raise InvalidSpecError(f"newer_than is not a DeltaRef dict: {value!r:.120}") from None
            return DeltaRef.from_dict(parsed)
    if isinstance(value, Mapping) and not isinstance(value, dict):
        value = dict(value)
    return DeltaRef.coerce(value)  # type: ignore[arg-type]


def _version_unmet(conditions: VersionConditions, latest: int) -> tuple[str, ...]:
    unmet = []
    if conditions.min_version is not None and latest < conditions.min_version:
        unmet.append(f"version >= {conditions.min_version}")
    if conditions.newer_than is not None and latest <= conditions.newer_than.version:
        unmet.append(f"newer than version {conditions.newer_than.version}")
    return tuple(unmet)


def _partition_present(log: DeltaLog, version: int, partition: Partition) -> bool:
    from airflow_provider_dltrain.lake.table import has_partition

    return has_partition(log.uri, version, partition, log.storage_options)


def _truthy(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return bool(value)
