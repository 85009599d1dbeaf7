"""``dltrain backfill-report DAG START END``: per date, did the newest run give the nightly answer?

For each date it takes the newest run of the DAG whose data interval starts on that date and says:

- **reproduced**: the run committed no Delta version, trained no model and submitted no cloud job;
- **reproduced, recomputed**: it committed and trained nothing, but submitted a job to find that out;
- **changed**: what it committed (table, partition, version) and, against the previous commit of that
  partition, what differed (the rows' content digest, the model or input version it was scored with,
  the recorded input facts, code or parameters); what it trained, and against the previous training
  for that cut-off, whether the data, the code or the hyper-parameters differed (and which ones).

Everything comes from what the provider already records: the task states and XComs of the run in
Airflow's metadata database, the ``airflow.*``/``dltrain.*`` keys of each Delta commit, and the
``dltrain.*`` tags of each MLflow run. Nothing here writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from airflow_provider_dltrain.backfill_runs import run_outcomes
from airflow_provider_dltrain.store.config import TrackingConfig

FIRST = "first"
IDENTITY = {
    "dltrain.data_fingerprint": "data",
    "dltrain.code_hash": "code",
    "dltrain.params_hash": "hyper-parameters",
}
# commitInfo keys that say nothing about the content (who committed, when, how many retries)
# (the recorded re-run facts are summarised by ``dltrain.rerun_changed``: which of them changed)
_VOLATILE = {
    "dltrain.partition",
    "dltrain.txn",
    "dltrain.attempt",
    "dltrain.rerun_facts",
    "dltrain.rerun_changed",
}
RERUN_CHANGED = "dltrain.rerun_changed"
_WORDS = {
    "dltrain.content_digest": "rows",
    "dltrain.model_version": "model version",
    "dltrain.model_name": "model",
    "dltrain.model_uri": "model",
    "dltrain.input_version": "input version",
    "dltrain.input_uri": "input table",
    "dltrain.rows_quarantined": "rows quarantined",
}


@dataclass
class DateReport:
    """What the newest run for ``ds`` did.

    ``verdict``: ``computed`` (everything it wrote was the first of its kind: a first run), ``reproduced``, ``recomputed``,
    ``changed``, ``unknown`` (it committed a version whose commit record is gone, or returned a trained
    model whose MLflow run cannot be read, so what it changed cannot be told; ``notes`` say which), ``failed``, ``in progress`` (queued or running) or ``no run``. ``notes`` say what to do
    when the run is stuck or was stopped by a cancelled backfill (see :func:`stall_notes`).
    """

    dag_id: str
    ds: str
    verdict: str
    run_id: str | None = None
    runs: int = 0
    changes: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. a pin read from a later version, and why

    def to_dict(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "ds": self.ds,
            "verdict": self.verdict,
            "run_id": self.run_id,
            "runs": self.runs,
            "changes": list(self.changes),
            "jobs": list(self.jobs),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DateReport:
        return cls(
            dag_id=str(data.get("dag_id", "")),
            ds=str(data.get("ds", "")),
            verdict=str(data.get("verdict", "unknown")),
            run_id=data.get("run_id"),
            runs=int(data.get("runs") or 0),
            changes=list(data.get("changes") or []),
            jobs=list(data.get("jobs") or []),
            notes=list(data.get("notes") or []),
        )


class _Lookups:
    """Delta histories and MLflow lookups, each read once for a whole report."""

    def __init__(self, tracking: TrackingConfig | None, storage_options: Mapping[str, str] | None) -> None:
        self.tracking = tracking
        self.storage_options = dict(storage_options or {}) or None
        self._indexes: dict[str, Any] = {}
        self._client: Any = None

    def index(self, uri: str) -> Any:
        """The table's history index (``lake.history_index``), None when the table cannot be read."""
        if uri not in self._indexes:
            from airflow_provider_dltrain.lake import history_index

            try:
                self._indexes[uri] = history_index.load(uri, self.storage_options)
            except Exception:  # a table since removed: nothing to say about its commits
                self._indexes[uri] = None
        return self._indexes[uri]

    def reresolved(self, ref: Mapping[str, Any]) -> str | None:
        """Why a pinned version is read from a later one (its commit files are gone), or None."""
        from airflow_provider_dltrain.lake.history_recovery import readable_from

        try:
            later = readable_from(str(ref["uri"]), int(ref["version"]), self.storage_options)
        except Exception:  # the note is an explanation: never let it hide the verdict
            return None
        if later is None:
            return None
        return (
            f"pin {ref['uri']} version {ref['version']} re-resolved: its commit files were removed by log "
            f"retention, so its rows were read from version {later}, the oldest readable one (no commit in "
            "between changed them or the table's columns)"
        )

    def commit(self, uri: str, version: int) -> dict[str, Any] | None:
        """Commit ``version``'s info with its ``version`` (from the index: one read, log retention or not)."""
        index = self.index(uri)
        record = index.record(version) if index is not None else None
        return {**record["info"], "version": version} if record else None

    def previous_write(self, uri: str, partition: str, version: int) -> dict[str, Any] | None:
        """The newest commit before ``version`` that recorded writing ``partition`` (its canonical JSON)."""
        from airflow_provider_dltrain.lake import history_index

        index = self.index(uri)
        try:
            key = history_index.key_of(json.loads(partition))
        except (ValueError, AttributeError):
            return None
        for write in index.recorded_writes(key, version - 1) if index is not None else []:
            return self.commit(uri, write.version)
        return None

    def client(self) -> Any:
        if self._client is None and self.tracking is not None:
            self._client = self.tracking.client()
        return self._client

    def trained_in(self, value: Any, task_start: str | None) -> Any | None:
        """The MLflow run a task's TrainResult names, when that try trained it (not a reused result).

        :raises _Unreadable: the value is a TrainResult but its run cannot be read (no tracking store
            given, or the store refused): whether this try trained cannot be told.
        """
        if not isinstance(value, dict) or not {"run_id", "code_hash"} <= set(value):
            return None
        client = self.client()
        if client is None:
            raise _Unreadable(f"no MLflow store was given to read its run {value['run_id']}")
        try:
            run = client.get_run(str(value["run_id"]))
        except Exception as err:
            if getattr(err, "error_code", None) == "RESOURCE_DOES_NOT_EXIST":
                return None  # a run since deleted: nothing to compare with
            raise _Unreadable(f"its MLflow run {value['run_id']} could not be read ({err})") from err
        if task_start and run.info.start_time < _millis(task_start):
            return None  # an earlier run handed back (a reused trial)
        return run

    def previous_training(self, run: Any) -> Any | None:
        """The newest finished run before ``run`` in its experiment with the same data cut-off."""
        client = self.client()
        cutoff = run.data.tags.get("dltrain.data_cutoff")
        if client is None or not cutoff:
            return None
        found = client.search_runs(
            [run.info.experiment_id],
            filter_string=f"tags.`dltrain.data_cutoff` = '{_q(cutoff)}' and attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
        )
        for other in found:
            if other.info.run_id != run.info.run_id and other.info.start_time < run.info.start_time:
                return other
        return None


def _q(text: str) -> str:
    return text.replace("'", "\\'")


def explain(
    dag_id: str,
    ds: str,
    runs: list[dict[str, Any]],
    tracking: TrackingConfig | None = None,
    storage_options: Mapping[str, str] | None = None,
    *,
    lookups: _Lookups | None = None,
) -> DateReport:
    """The report for one date from its runs (oldest first), as :func:`run_outcomes` returns them."""
    if not runs:
        return DateReport(dag_id, ds, "no run")
    look = lookups or _Lookups(tracking, storage_options)
    newest = runs[-1]
    report = DateReport(dag_id, ds, "reproduced", run_id=newest.get("run_id"), runs=len(runs))
    run_id = str(newest.get("run_id") or "")
    tries = newest.get("tries") or {}
    _commits_and_pins(look, report, newest.get("xcom") or {}, run_id, tries)
    for task_id, value in sorted((newest.get("xcom") or {}).items()):
        try:
            run = look.trained_in(value, (tries.get(task_id) or {}).get("start"))
        except _Unreadable as err:
            report.notes.append(f"{task_id} returned a trained model, but {err}{_UNTOLD}")
            continue
        if run is not None:
            report.changes.append(_training_change(look, run))
    for task_id, job in sorted((newest.get("jobs") or {}).items()):
        report.jobs.append(f"{task_id}: {_job_words(job)}")
    state = str(newest.get("state") or "").rsplit(".", 1)[-1].lower()
    if state in ("queued", "running"):
        report.verdict = "in progress"
    elif state != "success":
        report.verdict = "failed"
    elif report.changes:
        first = all(
            change.endswith((f"{FIRST} write of that partition", f"{FIRST} training for that cut-off"))
            for change in report.changes
        )
        report.verdict = "computed" if first else "changed"
    elif any(note.endswith((_GONE, _UNTOLD)) for note in report.notes):
        report.verdict = "unknown"  # it committed, but what it changed cannot be read: never "reproduced"
    elif report.jobs:
        report.verdict = "recomputed"
    return report


def _commits_and_pins(
    look: _Lookups, report: DateReport, xcom: Mapping[str, Any], run_id: str, tries: Mapping[str, Any]
) -> None:
    """What each Delta version the run returned says: a commit it made (a change), a re-resolved pin (a note)."""
    seen: set[tuple[str, int]] = set()
    for task_id, value in sorted(xcom.items()):
        for ref in _delta_refs(value):
            if (ref["uri"], ref["version"]) in seen:  # a later task passing the same version on
                continue
            seen.add((ref["uri"], ref["version"]))
            if ref.get("committed") is False:  # a skip hands back an earlier write: nothing to compare
                change = None
            elif ref.get("committed") is True and look.commit(ref["uri"], int(ref["version"])) is None:
                report.notes.append(f"{task_id} committed {ref['uri']} version {ref['version']}{_GONE}")
                change = None
            else:
                change = _commit_change(look, report.dag_id, run_id, task_id, ref, tries)
            if change:
                report.changes.append(change)
            note = look.reresolved(ref)
            if note:
                report.notes.append(f"{task_id}: {note}")


class _Unreadable(Exception):
    """What a run did cannot be read back (the message says what and why)."""


_UNTOLD = ": whether that try trained cannot be told"
_GONE = (
    ", but that commit's record is gone (log retention removed its commit file and the table's history "
    "index holds no record of it): what it changed cannot be told"
)


def _delta_refs(value: Any) -> Iterator[dict[str, Any]]:
    """Every ``{"uri", "version"}`` in a task's return value (a DeltaRef, its quarantine, ...)."""
    if isinstance(value, dict):
        if isinstance(value.get("uri"), str) and isinstance(value.get("version"), int):
            yield value
        for inner in value.values():
            if isinstance(inner, dict):
                yield from _delta_refs(inner)


def _made_by(commit: Mapping[str, Any], dag_id: str, run_id: str, tries: Mapping[str, Any]) -> bool:
    """Whether the latest try of a task of this run made ``commit``.

    A cleared task re-runs under the same run id, so the run id alone would credit the nightly's
    commit to the backfill that reproduced it: the try number (or, where a commit lacks it, a commit
    time after the try started) tells them apart.
    """
    if commit.get("airflow.run_id") != run_id or commit.get("airflow.dag_id") != dag_id:
        return False
    latest = tries.get(str(commit.get("airflow.task_id"))) or {}
    if commit.get("airflow.try_number") and latest.get("try_number") is not None:
        return str(commit["airflow.try_number"]) == str(latest["try_number"])
    start = latest.get("start")
    return start is None or int(commit.get("timestamp") or 0) >= _millis(start)


def _millis(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def _commit_change(
    look: _Lookups, dag_id: str, run_id: str, task_id: str, ref: dict[str, Any], tries: Mapping[str, Any]
) -> str | None:
    """How the commit ``ref`` names differs from the previous write of its partition, when this run made it."""
    commit = look.commit(ref["uri"], int(ref["version"]))
    if commit is None or not _made_by(commit, dag_id, run_id, tries):
        return None  # pinned or read by this run, or committed by an earlier execution of it
    partition = commit.get("dltrain.partition")
    where = _partition_words(partition)
    head = f"{commit.get('airflow.task_id') or task_id} committed {ref['uri']} {where} as version {ref['version']}"
    before = look.previous_write(ref["uri"], partition, int(ref["version"])) if partition else None
    if before is None:
        return f"{head}: {FIRST} write of that partition"
    diffs = [
        _diff_words(key, before.get(key), commit.get(key))
        for key in sorted(set(before) | set(commit))
        if key.startswith("dltrain.") and key not in _VOLATILE and before.get(key) != commit.get(key)
    ]
    if commit.get(RERUN_CHANGED):  # the operator's own account of why it computed the partition again
        diffs.insert(0, f"computed because: {commit[RERUN_CHANGED]}")
    return f"{head} (previous: version {before['version']}): " + (
        "; ".join(diffs) if diffs else "same recorded facts, rewritten"
    )


def _partition_words(partition: str | None) -> str:
    if not partition:
        return "(whole table)"
    try:
        values = json.loads(partition)
    except ValueError:
        return f"partition {partition}"
    return "partition " + ",".join(f"{k}={v}" for k, v in sorted(values.items()))


def _diff_words(key: str, old: Any, new: Any) -> str:
    word = _WORDS.get(key, key.split(".", 1)[1].replace("_", " "))
    if key == "dltrain.content_digest":
        return f"rows changed (content digest {str(old)[:12]} → {str(new)[:12]})"
    if old is None:
        return f"{word} {new} (not recorded before)"
    before, after = differing_parts(str(old), str(new))
    return f"{word} {before} → {after}"


def differing_parts(old: str, new: str) -> tuple[str, str]:
    """The part of two long values that differs, the shared path around it shown as ``…``.

    A digest or id (no ``/``) is cut to 12 characters; a URI keeps the path segments that differ, so
    ``file:///m/1/abc/artifacts/model`` and ``file:///m/1/def/artifacts/model`` read ``…/abc/…`` and
    ``…/def/…`` instead of two equal prefixes.
    """
    if len(old) <= 24 and len(new) <= 24:
        return old, new
    if "/" not in old + new:
        return old[:12], new[:12]
    head = _shared_start(old, new)
    start = head.rfind("/") + 1  # whole segments only
    tail = _shared_start(old[start:][::-1], new[start:][::-1])[::-1]
    cut = tail.find("/") if tail else -1
    stop = len(tail) - cut if cut >= 0 else 0

    def part(value: str) -> str:
        middle = value[start : len(value) - stop]
        return ("…/" if start else "") + middle + ("/…" if stop > 1 else "/" if stop == 1 else "")

    return part(old), part(new)


def _shared_start(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _training_change(look: _Lookups, run: Any) -> str:
    tags = run.data.tags
    head = f"trained MLflow run {run.info.run_id} (cut-off {tags.get('dltrain.data_cutoff', '?')})"
    previous = look.previous_training(run)
    if previous is None:
        return f"{head}: {FIRST} training for that cut-off"
    changed = [word for tag, word in IDENTITY.items() if previous.data.tags.get(tag) != tags.get(tag)]
    if "hyper-parameters" in changed:
        params = sorted(
            k
            for k in set(previous.data.params) | set(run.data.params)
            if previous.data.params.get(k) != run.data.params.get(k)
        )
        detail = ", ".join(f"{k} {previous.data.params.get(k)} → {run.data.params.get(k)}" for k in params)
        changed[changed.index("hyper-parameters")] = (
            f"hyper-parameters ({detail})" if detail else "hyper-parameters"
        )
    if "data" in changed:
        old, new = previous.data.tags, tags
        versions = (old.get("dltrain.delta_version"), new.get("dltrain.delta_version"))
        if versions[0] != versions[1]:
            table = str(new.get("dltrain.delta_uri") or "the table").rstrip("/").rsplit("/", 1)[-1]
            changed[changed.index("data")] = f"data ({table} version {versions[0]} → {versions[1]})"
    what = ("changed: " + ", ".join(changed)) if changed else "nothing recorded differs"
    return f"{head} vs run {previous.info.run_id}: {what}"


def _job_words(job: Any) -> str:
    if isinstance(job, dict):
        ids = job.get("ids") or {}
        engine = job.get("engine") or job.get("name") or "cloud"
        return f"{engine} job {json.dumps(ids, sort_keys=True)}"
    return str(job)


def backfill_report(
    dag_id: str,
    start: date,
    end: date,
    tracking: TrackingConfig | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> list[DateReport]:
    """The report of every date in [start, end] (Airflow's metadata DB, the tables, MLflow)."""
    outcomes = run_outcomes(dag_id, start, end)
    look = _Lookups(tracking, storage_options)
    days = (end - start).days + 1
    reports = [
        explain(dag_id, ds, outcomes.get(ds, []), lookups=look)
        for ds in ((start + timedelta(days=i)).isoformat() for i in range(days))
    ]
    newest = {ds: runs[-1] for ds, runs in outcomes.items() if runs}
    for report in reports:
        report.notes += stall_notes(report.ds, newest)
    return reports


_WAITING = {"none", "scheduled", "queued", "up_for_reschedule", "deferred"}


def _state(value: Any) -> str:
    return str(value or "none").rsplit(".", 1)[-1].lower()


def stall_notes(ds: str, newest: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What to do about the newest run of ``ds`` when Airflow will not finish it by itself.

    ``newest``: date -> the newest run of that date (:func:`run_outcomes`' entries). Three cases seen
    with Airflow 3.3's backfills (LocalExecutor; see docs/backfills.md):

    - the run failed before any task started and its backfill is completed: cancelling a backfill
      fails its queued runs; they are not failures of the date;
    - the run is queued in a completed (cancelled) backfill: the scheduler never starts it
      (apache/airflow#72054);
    - the run is queued while every run slot of its live backfill is held by later dates, one of
      which waits on a task (``depends_on_past``) that only this date's run can finish: clearing a
      failed date in the middle of a backfill leaves it so.
    """
    run = newest.get(ds)
    if not run:
        return []
    backfill = run.get("backfill") or {}
    state = _state(run.get("state"))
    started = any((t or {}).get("start") for t in (run.get("tries") or {}).values())
    if state == "failed" and backfill.get("completed") and not started:
        return [
            f"stopped before any task ran when backfill {backfill.get('id')} was cancelled, not a failure of "
            "this date: backfill it again (reprocess 'Missing and Errored Runs')"
        ]
    if state != "queued" or not backfill:
        return []
    if backfill.get("completed"):
        return [
            f"queued in backfill {backfill.get('id')}, which was cancelled: Airflow never starts it "
            "(apache/airflow#72054). Mark the run failed (grid: the run -> Mark as failed), then backfill "
            "the date again (reprocess 'Missing and Errored Runs')"
        ]
    holders = sorted(
        (other_ds, other)
        for other_ds, other in newest.items()
        if other_ds > ds
        and (other.get("backfill") or {}).get("id") == backfill.get("id")
        and _state(other.get("state")) == "running"
    )
    limit = backfill.get("max_active_runs") or 0
    blocked = [
        other_ds
        for other_ds, other in holders
        if any(_state(s) in _WAITING for s in (other.get("tasks") or {}).values())
    ]
    if holders and len(holders) >= limit and len(blocked) == len(holders):
        later = ", ".join(other_ds for other_ds, _ in holders)
        return [
            f"waits for a run slot of backfill {backfill.get('id')} (max_active_runs {limit}) held by {later}, "
            f"which wait(s) for this date's tasks (depends_on_past): clear {later} and the dates after it "
            "too (Clear -> 'Future'), so the backfill runs the dates in order again"
        ]
    return []


def format_line(report: DateReport) -> list[str]:
    """One headline for the date, then one indented line per change or submitted job."""
    runs = f"newest of {report.runs} runs" if report.runs > 1 else "1 run"
    if report.verdict == "no run":
        return [f"{report.ds}  no run of {report.dag_id}"]
    words = {
        "reproduced": "reproduced: nothing committed, trained or submitted",
        "recomputed": "reproduced, recomputed: nothing committed or trained, but job(s) submitted",
        "changed": "changed",
        "computed": "computed: first write of every output",
        "failed": "FAILED: the run did not succeed",
        "in progress": "in progress: the run is queued or running",
        "unknown": "UNKNOWN: it committed, but what it changed cannot be read (see the note)",
    }.get(report.verdict, report.verdict)
    lines = [f"{report.ds}  {words} ({runs}: {report.run_id})"]
    lines += [f"    {c}" for c in report.changes]
    lines += [f"    submitted {j}" for j in report.jobs]
    lines += [f"    note: {n}" for n in report.notes]
    return lines


def format_report(reports: list[DateReport]) -> str:
    if not reports:
        return "no dates"
    counts: dict[str, int] = {}
    for r in reports:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    lines = [f"backfill report of {reports[0].dag_id}, {reports[0].ds} to {reports[-1].ds}:"]
    for r in reports:
        lines += format_line(r)
    lines.append("total: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    return "\n".join(lines)
