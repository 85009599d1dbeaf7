"""Generated registry histories: versions trained and registered over months, promotions behind the
gate (backfilled ones, re-promotions of an older version), restated training rows, code and
hyper-parameter changes; after every step the real ``champion_as_of``, the live alias and the real
training skip decision (``training.skip_check.check_training``, what
``TrainModelOperator.training_check`` calls) are checked against :mod:`.registry_model`.

One MLflow SQLite store per process (:data:`STORE`), a fresh registered-model name and Delta table
per history.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.registry import champion_as_of
from airflow_provider_dltrain.registry.promote import gate_and_promote
from airflow_provider_dltrain.registry.register import register_model
from airflow_provider_dltrain.store.client import alias_holder, mlflow_client
from airflow_provider_dltrain.store.models import GateSpec
from airflow_provider_dltrain.training.runner import run_identity
from airflow_provider_dltrain.training.skip_check import WORDS, check_training
from tests.contract.contract_checks import SCRATCH, Violation
from tests.contract.registry_model import Facts, RegistryModel, Version

# several dates a month, and gaps of months (longer than champion_as_of's three months back)
DATES = (
    "2025-01-03",
    "2025-01-17",
    "2025-01-31",
    "2025-02-10",
    "2025-06-02",
    "2025-06-20",
    "2025-11-14",
    "2026-01-05",
)
PROBES = tuple(
    sorted({*DATES, "2024-12-31", "2025-01-16", "2025-03-31", "2025-07-01", "2025-12-31", "2026-04-30"})
)
HPARAMS = (
    {"lr": 0.1, "epochs": 2},
    {"epochs": 2, "lr": 0.1},
    {"lr": 0.2, "epochs": 2},
)  # 0 and 1: same, reordered
GATE = GateSpec("acc", "max")
STATS = {"histories": 0, "steps": 0}
STORE: dict[str, Any] = {}
_NAMES = itertools.count()


def train_fn(ctx: Any) -> dict[str, float]:  # the code hash comes from code_version
    return {}


def canonical(hparams: dict[str, Any]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted(hparams.items()))


class RegistryHistory(RuleBasedStateMachine):
    """One registered model and one training table, driven through months of nightlies and backfills."""

    @initialize(parts=st.sets(st.sampled_from(DATES), min_size=1, max_size=4))
    def create(self, parts: set[str]) -> None:
        STATS["histories"] += 1
        self.tracking = STORE["tracking"]
        self.name = f"contract-{os.getpid()}-{next(_NAMES)}"
        self.uri = tempfile.mkdtemp(prefix="dltrain-contract-registry-", dir=SCRATCH)
        self.rows: dict[str, int] = {}
        self.model = RegistryModel()
        self.steps: list[str] = []
        for day in sorted(parts):
            self._write(day, 1)

    def _write(self, day: str, value: int) -> None:
        import pyarrow as pa
        from deltalake import write_deltalake

        table = pa.table({"ds": [day, day], "x": [value, value + 1]})
        predicate = f"ds = '{day}'" if self.rows else None
        write_deltalake(
            self.uri,
            table,
            mode="overwrite" if self.rows else "append",
            partition_by=["ds"],
            predicate=predicate,
        )
        self.rows[day] = value

    def _facts(self, day: str, code: str, hparams: dict[str, Any]) -> Facts:
        rows = frozenset((d, v + k) for d, v in self.rows.items() if d <= day for k in (0, 1))
        return rows, code, canonical(hparams)

    def _ref(self) -> DeltaRef:
        from deltalake import DeltaTable

        return DeltaRef(self.uri, DeltaTable(self.uri).version())

    @rule(day=st.sampled_from(DATES), value=st.sampled_from([1, 2]))
    def restate(self, day: str, value: int) -> None:
        """A late or restated partition; writing the same rows again rewrites files only."""
        self.steps.append(f"restate({day!r}, {value})")
        self._write(day, value)

    @rule(
        day=st.sampled_from(DATES),
        code=st.sampled_from(["c1", "c2"]),
        hp=st.sampled_from(range(len(HPARAMS))),
        acc=st.sampled_from([0.5, 0.6, 0.7, 0.8]),
    )
    def train(self, day: str, code: str, hp: int, acc: float) -> None:
        """The nightly or a backfill of ``day``: skip or train, then register and gate the new version."""
        self.steps.append(f"train({day!r}, {code!r}, {hp}, {acc})")
        STATS["steps"] += 1
        hparams, facts, ref = HPARAMS[hp], self._facts(day, code, HPARAMS[hp]), self._ref()
        where = [("ds", "<=", day)]
        check = check_training(
            self.tracking,
            self.name,
            train_fn,
            ref,
            hparams,
            data_filter=where,
            data_cutoff=day,
            code_version=code,
        )
        may_name, changed = self.model.training(day, facts)
        if check.skipped != bool(may_name) or (
            check.skipped and check.champion not in (None, *self.model.versions)
        ):
            self._fail(
                f"training for {day}: skipped={check.skipped} ({check.skip_reason or check.note}); "
                f"the oracle says {'skip naming v' + str(sorted(may_name)) if may_name else 'train'} (T1)"
            )
        if check.skipped:
            if not any(f" v{n}," in check.skip_reason or "" for n in may_name):
                self._fail(
                    f"training for {day} skipped naming the wrong version: {check.skip_reason} "
                    f"(the oracle allows {sorted(may_name)}) (T1)"
                )
            return
        if {WORDS[tag] for tag in check.changed} != changed:
            self._fail(f"training for {day} names changed {check.changed}, the oracle {sorted(changed)} (T1)")
        tags = {k: v for k, v in run_identity(train_fn, ref, hparams, where, code_version=code).items()}
        tags["dltrain.data_cutoff"] = day
        number = len(self.model.versions) + 1
        mv = register_model(
            self.tracking,
            model_name=self.name,
            model_uri=f"file:///dltrain-contract/{self.name}/{number}",
            metrics={"acc": acc},
            tags=tags,
        )
        if mv.version != number:
            self._fail(f"registered as v{mv.version}, expected v{number}")
        self.model.versions[number] = Version(number, day, acc, facts)
        self._gate(number, day)

    @precondition(lambda self: self.model.versions)
    @rule(data=st.data())
    def regate(self, data: st.DataObject) -> None:
        """Gate an older version again for its cut-off: the recorded decision is replayed (C2).

        Gating it for a later cut-off is left out: it moves the version's one promotion record and
        changes the champion of the dates before (see ``test_registry_contract``'s known defect).
        """
        number = data.draw(st.sampled_from(sorted(self.model.versions)), label="version")
        self.steps.append(f"regate({number})")
        self._gate(number, self.model.versions[number].cutoff)

    def _gate(self, number: int, day: str) -> None:
        STATS["steps"] += 1
        result = gate_and_promote(
            self.tracking, model_name=self.name, version=number, gate=GATE, data_cutoff=day
        )
        expected = self.model.gate(number, day)
        if result.promoted != expected:
            self._fail(
                f"gate of v{number} for {day}: promoted={result.promoted} ({result.reason}); "
                f"the oracle says {expected} (C2)"
            )
        self.every_date_has_the_documented_champion()

    def every_date_has_the_documented_champion(self) -> None:
        """After every gate (nothing else changes the registry): every date's champion, the live alias."""
        for day in PROBES:
            found = champion_as_of(self.tracking, self.name, day)
            got = int(found.version) if found is not None else None
            if got != self.model.champion(day):
                self._fail(f"champion for {day} is v{got}, the oracle says v{self.model.champion(day)} (C1)")
        if self.model.versions:
            holder = alias_holder(mlflow_client(self.tracking), self.name, "champion")
            got = int(holder.version) if holder is not None else None
            if got != self.model.alias():
                self._fail(f"live alias on v{got}, the oracle says v{self.model.alias()} (C3)")

    def teardown(self) -> None:
        import shutil

        if hasattr(self, "uri"):
            shutil.rmtree(self.uri, ignore_errors=True)

    def _fail(self, message: str) -> None:
        history = "\n  ".join(self.steps)
        raise Violation(f"{message}\nsteps after create:\n  {history}")
