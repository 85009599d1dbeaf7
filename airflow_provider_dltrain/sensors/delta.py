"""Wait for a version of a Delta table that meets conditions, then pass its ``DeltaRef`` on through XCom."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_provider_dltrain.airflow_compat import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    default_deferrable,
)
from airflow_provider_dltrain.hooks.delta import DeltaTableHook, VersionCheck, VersionConditions
from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.operators.user_errors import fail_fast_on_user_error
from airflow_provider_dltrain.utils.input_checks import check_partition

if TYPE_CHECKING:
    from airflow.sdk import Context


PINS = ("newest", "partition_commit", "cutoff")
_PARTITION_PINS = ("partition_commit", "cutoff")  # pins computed from the partition condition
# The shortest interval ``mode="reschedule"`` is used with; a shorter one waits in ``poke`` mode. A
# reschedule keeps the try number, so the next poke runs under the same task-instance key as the one
# that just exited. When the scheduler queues that next poke before it has read the executor's
# "success" for the exit (the worker reports ``up_for_reschedule`` before its process has exited, and
# a 1 s reschedule is due at once), that late event finds the task instance queued or running with the
# same try, and the executor no longer holds the key (the new poke's own "running" event removed it):
# the scheduler takes the task for killed externally and fails it ("Executor LocalExecutor reported that
# the task instance ... finished with state success, but the task instance's state attribute is
# running"). Airflow's race (apache/airflow#71172, open in 3.3), reproduced with a plain
# BaseSensorOperator at poke_interval=1: failed within 40 s. Poke mode never re-queues the try.
RESCHEDULE_MIN_INTERVAL = 30.0


class DeltaTableVersionSensor(BaseSensorOperator):
    """Succeed once the table's newest data change meets every condition; return that ``DeltaRef`` dict.

    Only commits that changed data count: a commit that only maintains the table (``dltrain vacuum``'s
    VACUUM START/END, OPTIMIZE, table properties) is never a new version, and the version handed on
    is the newest one that changed data (a later maintenance commit reads the same rows). With no
    condition it waits for the table to exist. Pokes read a few small files of the
    ``_delta_log`` (their cost does not grow with the history); ``deferrable=True`` hands the wait
    to the triggerer. On timeout it raises ``AirflowSensorTimeout`` naming the table and the unmet
    conditions; an invalid condition fails the task at once, without retries.

    :param table_uri: local path or ``s3://`` URI of the Delta table (templated).
    :param min_version: succeed only on a version ``>= min_version``.
    :param partition: succeed only when this partition has a live file in the newest version,
        e.g. ``{"ds": "{{ ds }}"}`` (templated).
    :param newer_than: a ``DeltaRef`` (or its dict, JSON or an ``XComArg``) of the same table;
        succeed only on a newer version (templated).
    :param aws_conn_id: Amazon provider ``aws`` connection for ``s3://`` tables.
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param poll_interval: seconds between two looks at the table (``poke_interval`` is an alias).
        With ``mode="reschedule"``, an interval under ``RESCHEDULE_MIN_INTERVAL`` (30 s) waits in
        ``poke`` mode instead: Airflow's scheduler fails a sensor rescheduled that fast.
    :param pin: which version to hand on once the conditions hold (both pins other than
        ``"newest"`` need ``partition`` and refuse ``min_version``/``newer_than``):

        - ``"newest"`` (default): the newest version that changed data.
        - ``"partition_commit"``: the version that last wrote ``partition`` D. Reading it gives D
          exactly as it is now, the same bytes however many later partitions were appended since:
          what a task that reads *only* D needs for a backfill of D to reproduce the nightly run.
          A restatement of an earlier partition after D was written is not in that version.
        - ``"cutoff"``: the newest version that changed any partition ``<= D`` (string order per
          column, right for ISO dates). Later partitions never move it, a restatement of an earlier
          partition does: what a retraining DAG reading ``ds <= D`` needs, so that it sees restated
          history and yet a re-run of D reads the same bytes as long as nothing up to D changed.
          Since identical re-writes commit nothing, re-running an ETL date does not move it either.

        Neither partition pin moves for a VACUUM or a table-property commit (they touch no file). An
        OPTIMIZE that rewrote files of those partitions moves them, on purpose: it reads the same
        rows, and once a VACUUM has deleted the files it replaced, the earlier version is unreadable.
    """

    template_fields: Sequence[str] = ("table_uri", "partition", "newer_than")
    template_fields_renderers = {"partition": "json", "newer_than": "json"}
    ui_color = "#d7ecf5"

    def __init__(
        self,
        *,
        table_uri: str,
        min_version: int | None = None,
        partition: Mapping[str, str] | None = None,
        newer_than: DeltaRef | Mapping[str, Any] | str | None = None,
        aws_conn_id: str | None = "aws_default",
        deferrable: bool = default_deferrable(),
        poll_interval: float = 60.0,
        pin: str = "newest",
        **kwargs: Any,
    ) -> None:
        if pin not in PINS:
            raise ValueError(f"pin must be one of {PINS}, got {pin!r}")
        if pin in _PARTITION_PINS and not partition:
            raise ValueError(f"pin={pin!r} needs a partition condition")
        if pin in _PARTITION_PINS and (min_version is not None or newer_than is not None):
            # the pinned version is an earlier write, which may be older than the floor
            raise ValueError(
                f"pin={pin!r} cannot be combined with min_version or newer_than: the version it pins "
                "may be older than them; use pin='newest' for those"
            )
        check_partition(partition, rendered=False)  # a literal bad value: refused while the DAG is parsed
        poke_interval = kwargs.pop("poke_interval", poll_interval)
        super().__init__(poke_interval=poke_interval, **kwargs)
        # after the base class: ``mode`` may come from default_args, the interval as a timedelta
        if self.mode == "reschedule" and self.poke_interval < RESCHEDULE_MIN_INTERVAL:
            self.mode = "poke"  # see RESCHEDULE_MIN_INTERVAL
        self.table_uri = table_uri
        self.min_version = min_version
        self.partition = partition
        # a DeltaRef object is kept as its dict: templated fields must serialise with the DAG
        self.newer_than = newer_than.to_dict() if isinstance(newer_than, DeltaRef) else newer_than
        self.aws_conn_id = aws_conn_id
        self.deferrable = deferrable
        self.poll_interval = self.poke_interval
        self.pin = pin
        self._last_check: VersionCheck | None = None

    def _pinned(self, ref: DeltaRef) -> dict[str, Any]:
        """The ``DeltaRef`` dict to hand on for a version that met every condition."""
        if self.pin not in _PARTITION_PINS:
            return ref.to_dict()
        from airflow_provider_dltrain.lake.history import cutoff_commit, partition_commit

        pin, why = (
            (partition_commit, "the commit that last wrote")
            if self.pin == "partition_commit"
            else (cutoff_commit, "the newest commit that changed a partition at or before")
        )
        with fail_fast_on_user_error():
            storage = self.hook.get_storage_options(ref.uri)
            pinned = pin(ref.uri, dict(self.partition or {}), ref.version, storage)
        self.log.info("pinned %s to version %d, %s %s", ref.uri, pinned.version, why, self.partition)
        return pinned.to_dict()

    @cached_property
    def hook(self) -> DeltaTableHook:
        return DeltaTableHook(aws_conn_id=self.aws_conn_id)

    def _conditions(self) -> VersionConditions:
        with fail_fast_on_user_error():
            return VersionConditions.parse(self.table_uri, self.min_version, self.partition, self.newer_than)

    def _check(self) -> VersionCheck:
        conditions = self._conditions()
        with fail_fast_on_user_error():
            check = self.hook.check_version(
                conditions.table_uri, conditions.min_version, conditions.partition, conditions.newer_than
            )
        self._last_check = check
        return check

    def look(self) -> tuple[VersionCheck, dict[str, Any] | None]:
        """One look at the table, as ``poke`` and the backfill plan take it: the check, and the
        ``DeltaRef`` dict this run hands on (None while a condition is unmet)."""
        check = self._check()
        return check, (self._pinned(check.ref) if check.ref is not None else None)

    def poke(self, context: Context) -> bool | PokeReturnValue:
        check, pinned = self.look()
        self.log.info("%s: %s", check.conditions.table_uri, check.summary())
        if pinned is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=pinned)

    def execute(self, context: Context) -> Any:
        conditions = self._conditions()
        if not self.deferrable:
            try:
                return super().execute(context)
            except AirflowSensorTimeout as err:
                raise AirflowSensorTimeout(self._timeout_message(self._last_check)) from err
        check = self._check()  # already there: no need to occupy the triggerer
        if check.ref is not None:
            self.log.info("%s: %s", conditions.table_uri, check.summary())
            return self._pinned(check.ref)
        from airflow_provider_dltrain.triggers.delta import DeltaTableVersionTrigger

        self.defer(
            trigger=DeltaTableVersionTrigger(
                **conditions.to_kwargs(), aws_conn_id=self.aws_conn_id, poll_interval=self.poll_interval
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Return the ``DeltaRef`` dict the trigger found, or raise what stopped it."""
        event = event or {}
        status = event.get("status")
        if status == "success":
            with fail_fast_on_user_error():
                return self._pinned(DeltaRef.coerce(event["ref"]))
        if status == "error":
            message = f"waiting for a version of Delta table {self.table_uri} failed: {event.get('message')}"
            if event.get("retryable", True):
                raise AirflowException(message)
            raise AirflowFailException(message)
        raise AirflowException(
            f"the trigger waiting on Delta table {self.table_uri} sent no recognisable event "
            f"(status {status!r})"
        )

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except AirflowSensorTimeout as err:
            raise AirflowSensorTimeout(self._timeout_message(self._final_check())) from err

    def _final_check(self) -> VersionCheck | None:
        try:
            return self._check()
        except Exception:  # the timeout message must not depend on the table being readable
            return None

    def _timeout_message(self, check: VersionCheck | None) -> str:
        try:
            wanted = self._conditions().describe()
        except AirflowFailException:
            wanted = "the configured conditions"
        seen = check.summary() if check is not None else "the table could not be read at the end"
        return (
            f"Delta table {self.table_uri}: no version met [{wanted}] within the timeout of "
            f"{self.timeout:g}s (last look: {seen}). "
            "Check that the upstream task committed it, or raise `timeout`."
        )
