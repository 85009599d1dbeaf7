"""The checks of :mod:`.harness`: each real answer against the oracle (:mod:`.model`), rules R1-R7.

A real answer is the oracle's, or a typed refusal (a ``DltrainError``) where the oracle allows one;
an untyped error is a violation too (no clear refusal).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as with_seed
from hypothesis.stateful import run_state_machine_as_test

from airflow_provider_dltrain.exceptions import DltrainError
from airflow_provider_dltrain.lake.history import cutoff_commit, partition_commit
from airflow_provider_dltrain.lake.reader import read_version, scan_version
from airflow_provider_dltrain.lake.rerun_facts import version_fingerprint
from tests.contract.delta_sim import COLUMN, log_text
from tests.contract.model import Model

# DLTRAIN_CONTRACT_SURVEY=1: record every violation (by kind) instead of stopping at the first
SURVEY = os.environ.get("DLTRAIN_CONTRACT_SURVEY") == "1"
SURVEY_FOUND: dict[str, list[str]] = {}
# the soak (DLTRAIN_CONTRACT_MINUTES) reads every pin after every step
THOROUGH = float(os.environ.get("DLTRAIN_CONTRACT_MINUTES", "0") or 0) > 0
# the generated tables and repositories live in memory where there is a tmpfs: a history makes and
# removes a few hundred small files, folders and sqlite syncs, which cost more than the checks on a busy
# disk (to delta-rs, DVC and git it is the same local filesystem)
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def contract_settings(max_examples: int, steps: int | None = None) -> settings:
    """What every generated contract test runs with: no deadline, no example database, the
    ``@reproduce_failure`` blob printed; ``DLTRAIN_CONTRACT_SHRINK=0`` reports the first failing
    history as found, unshrunk (quicker). ``steps``: a state machine's step count."""
    quick = os.environ.get("DLTRAIN_CONTRACT_SHRINK") == "0"
    return settings(
        max_examples=max_examples,
        **({} if steps is None else {"stateful_step_count": steps}),
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate]
        if quick
        else [Phase.explicit, Phase.generate, Phase.shrink, Phase.explain],
    )


def run_seeds(machine: type, label: str, config: settings, seed: int, budget_s: float) -> None:
    """Run ``machine`` under ``config`` for seed ``seed``, then the next ones until ``budget_s`` is spent
    (once when it is 0); a failure names its seed."""
    started = time.monotonic()
    while True:
        seeded = with_seed(seed)(type(machine.__name__, (machine,), {}))
        try:
            run_state_machine_as_test(seeded, settings=config)
        except BaseException as err:
            err.add_note(f"{label} contract history seed {seed} (DLTRAIN_CONTRACT_SEED={seed})")
            raise
        seed += 1
        if time.monotonic() - started > budget_s:
            return


def category(message: str) -> str:
    """A violation's kind: its message without numbers, quoted values and paths."""
    return re.sub(r"[0-9]+|'[^']*'|/tmp/\S+", "#", message)[:160]


class Violation(AssertionError):
    """An answer the contract does not allow."""


class ContractChecks:
    """The checks, mixed into the state machine (which holds ``model``, ``uri``, ``tmp``)."""

    model: Model
    uri: str
    tmp: str
    fingerprints: dict[tuple[str, str], tuple[int, str]]

    def text(self, i: int) -> str:
        raise NotImplementedError

    def facts(self, i: int) -> str:
        raise NotImplementedError

    def _answer(self, what: str, call: Callable[[], Any]) -> Any:
        """The real answer, or the typed refusal (returned); anything else is a violation."""
        try:
            return call()
        except DltrainError as err:
            return err
        except Exception as err:  # not a clear, typed refusal
            raise Violation(f"{what}: untyped error {type(err).__name__}: {err}") from err

    def _pin_rule(self, what: str, expected: int | None, got: Any, selects: Callable[[str], bool]) -> None:
        """R1-R3: the exact pin; once the commits that name it are gone, a version holding the same
        rows (the oldest readable one, with a warning) or a typed refusal; never other rows."""
        if expected is None:
            if not isinstance(got, DltrainError):
                raise Violation(f"{what}: nothing to pin, yet pinned {got}")
            return
        known = self.model.all_knowable(expected)
        if isinstance(got, DltrainError):
            if known:
                raise Violation(
                    f"{what}: refused ({got}) although the history to name version {expected} is there"
                )
            return
        if got.version == expected:
            return
        if known or not 0 <= got.version <= self.model.latest:
            raise Violation(
                f"{what}: pinned version {got.version}, the contract says version {expected} (R1-R2)"
            )
        columns = self.model.columns(expected)
        if self.model.rows(got.version, selects, columns) != self.model.rows(expected, selects, columns):
            raise Violation(
                f"{what}: pinned version {got.version} for version {expected} after its history was lost, and "
                "their rows differ (R3)"
            )

    def check_cutoff_pin(self, text: str) -> None:
        got = self._answer(f"cutoff_commit <= {text}", lambda: cutoff_commit(self.uri, {COLUMN: text}))
        self._pin_rule(
            f"cut-off pin of {COLUMN} <= {text}", self.model.cutoff(text), got, self.model.at_or_before(text)
        )

    def check_partition_pin(self, text: str) -> None:
        got = self._answer(f"partition_commit {text}", lambda: partition_commit(self.uri, {COLUMN: text}))
        if isinstance(got, DltrainError) and self.model.kind == "timestamp":
            return  # a timestamp is no partition value a run names (':' and ' '): refused at the door
        self._pin_rule(
            f"partition pin of {COLUMN}={text}", self.model.partition_pin(text), got, lambda t: t == text
        )

    def check_unchanged_rerun(self, i: int) -> None:
        from airflow_provider_dltrain.etl.rerun_check import _decide

        text, facts = self.text(i), self.facts(i)
        if self.model.kind == "timestamp":
            return  # no partition value a run names (see check_partition_pin)
        check = self._answer(
            f"re-run of {text}",
            lambda: _decide(
                self.uri,
                {COLUMN: text},
                json.loads(facts),
                "",
                lambda _: None,
                False,
                os.path.join(self.tmp, "quarantine"),
                lambda last, reason, pairing: {"version": last.ref.version},
            ),
        )
        expected = self.model.may_skip(text, facts)
        last = self.model.last_data_write(text)
        known = last is not None and self.model.all_knowable(last)
        if isinstance(check, DltrainError):
            if known:
                raise Violation(
                    f"re-run of {COLUMN}={text} refused although its history is there (R5): {check}"
                )
            return
        if check.result is not None:
            if check.result["version"] != expected:
                raise Violation(
                    f"re-run of {COLUMN}={text} skipped returning version {check.result['version']}; the contract "
                    f"says {'compute' if expected is None else f'version {expected}'} (R5): {check.reason}"
                )
        elif expected is not None:
            why = "unchanged" if known else "the facts of its last write are lost: refuse, never recompute"
            raise Violation(
                f"re-run of {COLUMN}={text} computes although {why} since {expected} (R5): {check.reason}"
            )

    def check_report(self, i: int) -> None:
        """R7: the backfill report of the run that made date i's last write says it computed:
        ``computed`` (no earlier write of the partition by the provider) or ``changed`` (one before);
        when the history before that write is partly gone, either; when that write's own commit
        record is gone, ``unknown`` - never ``reproduced``, which says nothing was written."""
        from airflow_provider_dltrain.backfill_report import explain

        text = self.text(i)
        version = self.model.last_data_write(text)
        if version is None or self.model.versions[version].kind != "ours":
            return
        run = {
            "run_id": f"run-{i}-{version}",  # what _ours records as the writing run
            "state": "success",
            "xcom": {"ingest": {"uri": self.uri, "version": version, "committed": True}},
        }
        got = self._answer(f"backfill report of {text}", lambda: explain("contract", text, [run]))
        if isinstance(got, DltrainError):
            raise Violation(
                f"backfill report of {COLUMN}={text}: refused ({got}), a report never refuses (R7)"
            )
        earlier = any(v.kind == "ours" and text in v.touched for v in self.model.versions[:version])
        if not self.model.knowable(version):
            allowed = {"unknown"}
        elif all(self.model.knowable(v) for v in range(version)):
            allowed = {"changed" if earlier else "computed"}
        else:
            allowed = {"computed", "changed"}
        if got.verdict not in allowed:
            raise Violation(
                f"backfill report of the run that wrote {COLUMN}={text} as version {version} says "
                f"{got.verdict!r}; the contract says {' or '.join(sorted(allowed))} (R7): "
                f"{got.changes + got.notes}"
            )

    def check_read(self, version: int, filters: list[tuple[str, str, str]]) -> None:
        from airflow_provider_dltrain.lake.ref import DeltaRef

        selects = self.model.selects(filters)
        what = f"read of version {version} with {filters}"

        def read() -> Any:
            scan = scan_version(DeltaRef(self.uri, version), None, filters)
            return scan, read_version(scan, scan.schema.names, tuple([tuple(filters)]))

        got = self._answer(what, read)
        if isinstance(got, DltrainError):
            if self.model.fully_readable(version, selects):
                raise Violation(f"{what}: refused ({got}) although its log and files are there (R4)")
            return
        scan, table = got
        columns = tuple(scan.schema.names)
        if set(columns) != set(self.model.columns(version)):
            raise Violation(
                f"{what}: columns {list(columns)}, the version has {list(self.model.columns(version))} (R4)"
            )
        rows = _rows_of(table, self.model.kind, "extra" in columns)
        expected = self.model.rows(version, selects)
        if rows != expected:
            raise Violation(f"{what}: rows {rows}, the contract says {expected} (R4)")

    def check_one_block(self, texts: list[str]) -> None:
        """A backfill plan asks every date at once inside one block (``lake.state.one_state``), where the
        cut-off pin, the training data's fingerprint and a partition's presence are answered from
        structures built once for the block (a running newest write, prefix hashes, the checkpoint's
        paths by value): each must equal the answer the same call gives on its own, date by date,
        also at the version before the pin (where the prefix hash may not hold)."""
        from airflow_provider_dltrain.lake.ref import DeltaRef
        from airflow_provider_dltrain.lake.scan_plan import index_fingerprint
        from airflow_provider_dltrain.lake.state import one_state
        from airflow_provider_dltrain.lake.table import has_partition

        def answers() -> list[Any]:
            out: list[Any] = []
            for text in texts:
                pin = self._answer(
                    f"cutoff_commit <= {text}", partial(cutoff_commit, self.uri, {COLUMN: text})
                )
                out.append(repr(pin))
                if isinstance(pin, DltrainError):
                    continue
                for version in {pin.version, max(pin.version - 1, 0)}:
                    ref, where = DeltaRef(self.uri, version), [(COLUMN, "<=", text)]
                    out.append(self._answer("index_fingerprint", partial(index_fingerprint, ref, where)))
                    out.append(
                        self._answer(
                            "has_partition", partial(has_partition, self.uri, version, {COLUMN: text})
                        )
                    )
            return [repr(a) for a in out]

        alone = answers()
        with one_state():
            together = answers()
        if together != alone:
            pairs = enumerate(zip(together, alone, strict=False))
            diff = next((i for i, (a, b) in pairs if a != b), min(len(together), len(alone)))
            got = together[diff] if diff < len(together) else "nothing"
            raise Violation(f"inside one block answer {diff} is {got}, alone {alone[diff : diff + 1]}")

    def check_fingerprints(self, reads: list[tuple[int, list[tuple[str, str, str]]]]) -> None:
        """R6 for the newest pin against every content fingerprinted before (remembered by hash)."""
        from airflow_provider_dltrain.lake.ref import DeltaRef

        for version, filters in reads:
            ref = DeltaRef(self.uri, version)
            got = self._answer("version_fingerprint", partial(version_fingerprint, ref, filters))
            if isinstance(got, DltrainError):
                continue
            rows = repr((self.model.rows(version, self.model.selects(filters)), self.model.columns(version)))
            other = self.fingerprints.setdefault((got["hash"], repr(filters)), (version, rows))
            if other[1] != rows:
                raise Violation(
                    f"fingerprint {got['hash'][:12]} of {filters} names version {other[0]}'s rows and version "
                    f"{version}'s, which differ (R6)"
                )


def _rows_of(table: Any, kind: str, wide: bool) -> list[tuple[Any, ...]]:
    out = []
    for row in table.to_pylist():
        value = row[COLUMN]
        if kind == "date":
            value = value.isoformat()
        elif kind == "timestamp":
            value = log_text(kind, value)
        else:
            value = str(value)
        out.append((value, row["id"], row["value"], *((row["extra"],) if wide else ())))
    return sorted(out, key=repr)
