"""Generated histories of one table, each step performed on real files and the real decision layer,
every date checked against the oracle (:mod:`.model`) after every step.

The steps: nightly writes, late and restated partitions, another tool's writes (overwrite and
append, no commit metadata), a commit whose index update was lost (a crash, or two writers racing
past each other's update), OPTIMIZE and Z-order, adding a column, code and hyper-parameter changes
(the re-run facts), VACUUM with and without ``force``, a checkpoint with log clean-up (delta-rs's
at the newest version, Delta Spark's at every 10th), a lost history index (a copy of the lake made
with a plain Delta tool) and a lagging one (an older ``head.json`` put back). The partition column
is a string date, a ``date``, an ``int`` or a ``timestamp``.

After each step, for every date written so far: the cut-off pin (``lake.cutoff_commit``), the
partition pin (``lake.partition_commit``), the unchanged re-run decision (``etl.rerun_check``, from
``lake.rerun_facts``); and for the pins read so far, the rows and columns the one reader gives
(``lake.reader.scan_version``, recovery included) and the content fingerprint
(``lake.rerun_facts.version_fingerprint``). Each answer is the oracle's, or a typed refusal where the
oracle allows one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from airflow_provider_dltrain.lake import history_index
from airflow_provider_dltrain.lake.digest import DigestState
from airflow_provider_dltrain.lake.rerun_facts import META_RERUN_FACTS
from airflow_provider_dltrain.lake.storage import normalize_uri
from tests.contract.contract_checks import (
    SCRATCH,
    SURVEY,
    SURVEY_FOUND,
    THOROUGH,
    ContractChecks,
    Violation,
    category,
)
from tests.contract.delta_sim import COLUMN, SimTable, log_text
from tests.contract.model import Model, Row

KINDS = ("string", "date", "int", "timestamp")
INTS = (1, 2, 5, 9, 10, 11, 20, 99, 100, 101, 250, 1000)  # text order is not number order
DATES = 12
HORIZON = {
    "delta.logRetentionDuration": "interval 400 days",
    "delta.deletedFileRetentionDuration": "interval 400 days",
    "delta.checkpointInterval": "10",
}
STATS = {"histories": 0, "steps": 0, "started": 0}  # histories run to full length, steps checked
FOUND: dict[str, float] = {}  # when (time.monotonic()) and in which history the first violation was seen
STEPS = int(os.environ.get("DLTRAIN_CONTRACT_STEPS", "30"))


def date_text(kind: str, i: int) -> str:
    day = dt.date(2026, 1, 1) + dt.timedelta(days=i)
    if kind == "int":
        return str(INTS[i])
    if kind == "timestamp":
        return log_text(kind, dt.datetime(day.year, day.month, day.day, 6 * (i % 4), tzinfo=dt.timezone.utc))
    return day.isoformat()


def rows_of_seed(seed: int) -> list[tuple[int, int]]:
    """One to three small rows from one small number (few choices per step: histories stay long)."""
    return [((seed + k) % 6, (seed * (k + 3)) % 7 - 3) for k in range(1 + seed % 3)]


rows_strategy = st.integers(0, 40).map(rows_of_seed)
pick = st.integers(0, DATES - 1)  # a written date, by its position among them


class LakeHistory(ContractChecks, RuleBasedStateMachine):
    """One table's generated history (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0
        STATS["started"] += 1
        self.tmp = tempfile.mkdtemp(prefix="dltrain-contract-", dir=SCRATCH)
        self.uri = os.path.join(self.tmp, "t")
        self.model: Model
        self.table: SimTable
        self.written: list[int] = []  # date indices holding a partition
        self.missing: list[int] = []  # dates skipped by the nightly, to land late
        self.next_date = 0
        self.code = 0
        self.params = 0
        self.landing: dict[int, int] = {}  # date -> landing generation (its raw files)
        self.reads: list[tuple[int, list[tuple[str, str, str]]]] = []  # (version, filter) pinned so far
        self.index_copy: str | None = None  # an older _dltrain_history, for a lagging index
        self.fingerprints: dict[
            tuple[str, str], tuple[int, str]
        ] = {}  # hash -> the version and rows it named
        self.dirty = True  # something a read depends on changed: check every pinned read
        self.new_pin = False

    def teardown(self) -> None:
        if self.steps > STEPS:  # the invariant also runs once after the table is created
            STATS["histories"] += 1
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers ------------------------------------------------------------------------------------
    def text(self, i: int) -> str:
        return date_text(self.model.kind, i)

    def facts(self, i: int) -> str:
        return json.dumps(
            {
                "stage": "etl",
                "scheme": "dltrain-rerun-v2",
                "inputs": {
                    "raw": {"kind": "listing", "files": 1, "hash": f"landing-{self.landing.get(i, 0)}"}
                },
                "code": f"code-{self.code}",
                "params": f"params-{self.params}",
            },
            sort_keys=True,
        )

    def _rows(self, pairs: list[tuple[int, int]]) -> list[Row]:
        return [(a, b, b * 7 if self.table.extra else None) for a, b in pairs]

    def _ours(self, i: int, rows: list[Row], *, index: bool = True) -> None:
        """The provider's write of date i: its commit metadata, then the index update it makes."""
        import pyarrow as pa

        text = self.text(i)
        data = pa.table({"id": [r[0] for r in rows], "value": [r[1] for r in rows]})
        if self.table.extra:
            data = data.append_column("extra", pa.array([r[2] for r in rows], pa.int64()))
        state = DigestState()
        state.update(data)
        partition = json.dumps({COLUMN: text}, sort_keys=True, separators=(",", ":"))
        info = {
            "dltrain.partition": partition,
            "dltrain.content_digest": state.content_digest(data.schema),
            META_RERUN_FACTS: self.facts(i),
            "airflow.dag_id": "contract",
            "airflow.run_id": f"run-{i}-{self.model.latest + 1}",
            "txn": {"appId": f"dltrain/partition/{partition}", "version": self.model.latest + 1},
        }
        self.table.write(text, rows, info)
        self.model.write(text, rows, facts=self.facts(i))
        if index:
            history_index.update(self.uri)
        if i not in self.written:
            self.written.append(i)

    def _written(self, which: int) -> int:
        dates = sorted(self.written)
        return dates[which % len(dates)]

    def _pin_reads(self, i: int) -> None:
        """Remember what a run of date i reads (its pins and filters), for the read checks."""
        text = self.text(i)
        bound = f"{text}Z" if self.model.kind == "timestamp" else text  # a filter on a UTC column
        pin = self.model.cutoff(text)
        if pin is not None:
            self.reads.append((pin, [(COLUMN, "<=", bound)]))
            if self.model.kind == "int":
                self.reads.append((pin, [(COLUMN, "<", bound)]))
        own = self.model.partition_pin(text)
        if own is not None:
            self.reads.append((own, [(COLUMN, "=", bound)]))
        self.reads = self.reads[-8:]
        self.new_pin = True

    def _observe(self) -> None:
        t = self.table
        names = os.listdir(os.path.join(self.uri, "_delta_log"))
        # the commit files still there: one listing, not an existence probe per version
        commits = (n[:-5] for n in names if n.endswith(".json") and len(n) == 25)
        present = {v for v in map(int, filter(str.isdigit, commits)) if v <= t.version}
        checkpoints = {int(n.split(".")[0]) for n in names if ".checkpoint" in n}
        # each generation once (every version repeats the partitions it did not touch)
        generations = {gen for v in self.model.versions for gen, _ in v.parts.values()}
        gone = {
            gen
            for gen in generations - self.model.gone_generations
            if not all(self.table.file_exists(add) for add in self.files.get(gen, []))
        }
        self.model.observe(present, checkpoints, t.recorded_versions(), gone)

    # -- steps --------------------------------------------------------------------------------------
    @initialize(kind=st.sampled_from(KINDS), horizon=st.booleans(), rows=rows_strategy)
    def create(self, kind: str, horizon: bool, rows: list[tuple[int, int]]) -> None:
        """A table the provider creates (the horizon's retention) or one another tool created."""
        self.model = Model(kind)
        start = int((dt.datetime.now() - dt.timedelta(days=40)).timestamp() * 1000)
        self.table = SimTable(self.uri, kind, HORIZON if horizon else {}, start)
        self.files: dict[int, list[dict[str, Any]]] = {}
        self.table.create()
        self.model.create()
        self.nightly(rows, skip=False)

    def _track_files(self) -> None:
        for text, (gen, _) in self.model.versions[-1].parts.items():
            self.files.setdefault(gen, list(self.table.live.get(text, [])))

    @precondition(lambda self: self.next_date < DATES)
    @rule(rows=rows_strategy, skip=st.sampled_from([False, False, False, True]))
    def nightly(self, rows: list[tuple[int, int]], skip: bool) -> None:
        """The nightly run of the next date; sometimes a date's data is late (skipped for now)."""
        i = self.next_date
        self.next_date += 1
        if skip and self.next_date < DATES:
            self.missing.append(i)
            i = self.next_date
            self.next_date += 1
        self.table.next_day()
        self.landing[i] = 0
        self._ours(i, self._rows(rows))
        self._track_files()
        self._pin_reads(i)

    @precondition(lambda self: self.missing)
    @rule(rows=rows_strategy)
    def late(self, rows: list[tuple[int, int]]) -> None:
        """A late partition: an earlier date's data lands after later dates were written."""
        i = self.missing.pop(0)
        self.landing[i] = 0
        self._ours(i, self._rows(rows))
        self._track_files()
        self._pin_reads(i)

    @precondition(lambda self: self.written)
    @rule(which=pick, rows=rows_strategy)
    def restate(self, which: int, rows: list[tuple[int, int]]) -> None:
        """New landing files for an earlier date, re-ingested by the provider."""
        i = self._written(which)
        self.landing[i] = self.landing.get(i, 0) + 1
        self._ours(i, self._rows(rows))
        self._track_files()
        self._pin_reads(i)

    @precondition(lambda self: self.written)
    @rule(which=pick, rows=rows_strategy, append=st.booleans())
    def foreign_write(self, which: int, rows: list[tuple[int, int]], append: bool) -> None:
        """Another tool (plain delta-rs, Spark) overwrites or appends to a partition, recording nothing."""
        i = self._written(which)
        text = self.text(i)
        self.table.write(text, self._rows(rows), {}, mode="append" if append else "overwrite")
        self.model.write(text, self._rows(rows), facts=None, append=append)
        self._track_files()

    @precondition(lambda self: self.written)
    @rule(which=pick, rows=rows_strategy)
    def write_without_index_update(self, which: int, rows: list[tuple[int, int]]) -> None:
        """The provider's commit whose index update never happened (killed right after the commit, or
        two writers racing so that neither one's update saw the other's commit)."""
        i = self._written(which)
        self.landing[i] = self.landing.get(i, 0) + 1
        self._ours(i, self._rows(rows), index=False)
        self._track_files()
        self._pin_reads(i)

    @precondition(lambda self: self.written)
    @rule(everything=st.booleans(), zorder=st.booleans(), which=pick)
    def optimize(self, everything: bool, zorder: bool, which: int) -> None:
        """OPTIMIZE or Z-order: files rewritten, rows unchanged (``dataChange: false``)."""
        texts = [self.text(i) for i in sorted(self.written)]
        if not everything:
            texts = [self.text(self._written(which))]
        parts = self.model.versions[-1].parts
        self.table.compact(texts, {t: list(parts[t][1]) for t in texts}, zorder)
        self.model.compact(texts)
        self._track_files()

    @precondition(lambda self: not self.table.extra)
    @rule()
    def add_column(self) -> None:
        """Schema evolution: a nullable column added to the table (no file rewritten)."""
        self.table.add_column()
        self.model.add_column("extra")

    @rule(what=st.sampled_from(["code", "params"]))
    def change_code_or_params(self, what: str) -> None:
        """A new transform code hash or new parameters: every date's re-run facts change."""
        setattr(self, what, getattr(self, what) + 1)

    @rule(force=st.booleans())
    def vacuum(self, force: bool) -> None:
        """``dltrain vacuum``: removed files older than the retention; ``--force`` takes them all."""
        from airflow_provider_dltrain.lake.maintenance import vacuum

        vacuum(self.uri, retention_hours=0 if force else None, force=force)
        self._sync_maintenance()
        self.dirty = True

    def _sync_maintenance(self) -> None:
        """Commits delta-rs made by itself (VACUUM START/END): in the model as maintenance."""
        from airflow_provider_dltrain.lake.log import DeltaLog

        newest = DeltaLog(self.uri).latest_version() or 0
        while self.table.version < newest:
            self.table.version += 1
            self.model.maintain()

    @rule(spark=st.booleans())
    def clean_up_log(self, spark: bool) -> None:
        """A checkpoint (delta-rs: at the newest version; Delta Spark: every 10th), then log retention
        deletes the commit files before it."""
        at = self.table.checkpoint(10 if spark else None)
        if at is not None:
            self.table.expire_log(at)
        self.dirty = True

    @rule()
    def lose_index(self) -> None:
        """The lake copied with a plain Delta tool: ``_dltrain_history`` is not there."""
        self.table.drop_index()
        self.dirty = True

    @rule()
    def lag_index(self) -> None:
        """The index lags the log: the first time, a copy of ``_dltrain_history`` is kept; later, that
        older copy is put back (a writer's late update, or an old copy of the folder restored)."""
        if not os.path.isdir(self.table.index_dir()):
            return
        if self.index_copy is None:
            self.index_copy = os.path.join(self.tmp, "index-copy")
            shutil.copytree(self.table.index_dir(), self.index_copy)
            return
        self.table.drop_index()
        shutil.copytree(self.index_copy, self.table.index_dir())
        self.dirty = True

    # -- the checks ---------------------------------------------------------------------------------
    @invariant()
    def every_date_answers_as_the_contract_says(self) -> None:
        if not hasattr(self, "model"):
            return
        STATS["steps"] += 1
        self.steps += 1
        self._observe()
        checks: list[Callable[[], None]] = []
        dates = sorted(self.written)
        # make test: every date's cut-off pin; the partition pin and the re-run decision of one date a
        # step, in turn (each costs a few index loads); the soak: all of them for every date
        turn = dates if THOROUGH or not dates else [dates[self.steps % len(dates)]]
        for i in dates:
            checks.append(partial(self.check_cutoff_pin, self.text(i)))
        if self.model.kind == "string" or THOROUGH:  # the plan's kept answers exist for string columns
            checks.append(partial(self.check_one_block, [self.text(i) for i in dates]))
        for i in turn:
            checks += [
                partial(self.check_partition_pin, self.text(i)),
                partial(self.check_unchanged_rerun, i),
                partial(self.check_report, i),
            ]
        # A pinned read gives other rows only if the log, the files or the index lost something (the
        # versions themselves never change). Each read opens the table (about 10 ms): make test reads two
        # pin in turn after such a step, the soak reads every pin after every step.
        if THOROUGH:
            reads = self.reads
        elif self.dirty and self.reads:
            reads = [self.reads[self.steps % len(self.reads)]]
        else:
            reads = []
        checks += [partial(self.check_read, version, filters) for version, filters in reads]
        if self.new_pin:
            checks.append(partial(self.check_fingerprints, self.reads[-1:]))
        with one_index_load_per_state():
            for check in checks:
                try:
                    check()
                except Violation as err:
                    if not SURVEY:
                        FOUND.setdefault("at", time.monotonic())  # before shrinking: the time to find it
                        FOUND.setdefault("history", STATS["started"])
                        raise
                    SURVEY_FOUND.setdefault(category(str(err)), []).append(str(err))
        self.dirty = self.new_pin = False


@contextlib.contextmanager
def one_index_load_per_state() -> Iterator[None]:
    """While the checks of one step run, each reader's load of the history index with the same
    arguments gives the index the first such load built.

    Provably the same answer: the checks only read (no ``persist``; nothing under the table changes
    until the next step), and a load is a function of the files and its arguments; no caller changes
    the index it gets (``backfill_report`` shares one per table the same way). Every decision
    function still runs on every check; a step's first load of each kind still reads the files.
    Before this, a third of the contract's time went to loading the same files again, check after
    check (8,600 loads for 40 histories; now about two a step).
    """
    real = history_index.load
    signature = inspect.signature(real)
    built: dict[str, Any] = {}

    def load(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        if bound.arguments.get("persist"):
            return real(*args, **kwargs)
        key = repr(sorted({**bound.arguments, "uri": normalize_uri(bound.arguments["uri"])}.items()))
        if key not in built:  # a refusal is not kept: raised again by a fresh load
            built[key] = real(*args, **kwargs)
        return built[key]

    history_index.load = load  # type: ignore[assignment]
    try:
        yield
    finally:
        history_index.load = real  # type: ignore[assignment]
