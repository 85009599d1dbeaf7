"""The promise, end to end: nightly D1..D4; whole days re-run; a restated partition; backfills; lineage.

Every run goes through the ``airflow dags test`` code path with the interval [D, D+1) a backfill of D
gets, on the demo's embedded defaults (local Spark, Delta on disk, MLflow on SQLite).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from datetime import date, timedelta

import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.exceptions import TableNotFoundError

pytestmark = pytest.mark.slow

START = date(2026, 11, 24)
DATES = [(START + timedelta(days=i)).isoformat() for i in range(4)]
D2, D3, D4 = DATES[1], DATES[2], DATES[3]
MODEL = "dltrain_digits"
FAST = {"epochs": 6, "batch_size": 32, "lr": 0.003, "seed": 7}
PER_DAY = 200  # images a day


def _files_by_partition(uri):
    table = lake.open_table(uri)
    import pyarrow as pa

    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    out: dict[str, set[str]] = {}
    for a in adds:
        out.setdefault(a["partition.ds"], set()).add(a["path"])
    return out


def _rows(uri, ds):
    import pyarrow.dataset as pads

    table = lake.open_table(uri).to_pyarrow_dataset().to_table(filter=pads.field("ds") == ds)
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in table.to_pylist())


class Demo:
    def __init__(self, home):
        os.environ["DLTRAIN_HOME"] = str(home)
        from airflow_provider_dltrain.demo import paths
        from airflow_provider_dltrain.demo.run import airflow_env, ensure_airflow_db
        from airflow_provider_dltrain.demo.seed import seed

        self.paths = paths
        seed(paths.landing(), START, len(DATES), per_day=PER_DAY)
        self.env = airflow_env()
        ensure_airflow_db(self.env)
        from airflow_provider_dltrain.store.config import TrackingConfig

        self.tracking = TrackingConfig(tracking_uri=paths.mlflow_uri())
        self.predictions = paths.table("digit_predictions")
        self.digits = paths.table("digits")
        self.latest = {}  # (dag_id, ds) -> task states and return values of its newest run
        from airflow_provider_dltrain.demo.run import DagRunner

        # one runner process for the module: Airflow and Spark start once, not once per test
        self.runner = DagRunner(self.env).__enter__()

    def run(self, runs):
        """Run ``runs`` in the module's runner process; every run must succeed."""
        outcomes = self.runner.run(runs)
        bad = [o for o in outcomes if not o.ok]
        assert len(outcomes) == len(runs) and not bad, bad[0].tail if bad else outcomes
        for o in outcomes:
            assert o.state.get("tasks"), o  # the runner read the run back from Airflow's DB
            self.latest[(o.dag_id, o.ds)] = o.state
        return outcomes

    def outcome(self, dag_id, ds):
        return self.latest[(dag_id, ds)]

    def versions(self):
        client = self.tracking.client()
        return sorted(int(v.version) for v in client.search_model_versions(f"name='{MODEL}'"))

    def live(self):
        return int(self.tracking.client().get_model_version_by_alias(MODEL, "champion").version)

    def champion_version(self, ds):
        from airflow_provider_dltrain.registry import champion_as_of

        return champion_as_of(self.tracking, MODEL, ds).version

    def champions(self):
        return {ds: self.champion_version(ds) for ds in DATES}

    def lineage(self, version):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_provider_dltrain",
                "lineage",
                self.predictions,
                "--version",
                str(version),
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "DLTRAIN_HOME": self.paths.home()},
        ).stdout


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    old = os.environ.get("DLTRAIN_HOME")
    d = Demo(tmp_path_factory.mktemp("nightly") / "home")
    nightly = d.run(
        [
            (dag, ds, {"hparams": FAST} if dag == "dltrain_retrain" else None)
            for ds in DATES
            for dag in ("dltrain_ingest", "dltrain_retrain")
        ]
    )
    d.nightly = {
        "rows": {ds: _rows(d.predictions, ds) for ds in DATES},
        "files": _files_by_partition(d.predictions),
        "versions": d.versions(),
        "live": d.live(),
        "champions": d.champions(),
        "ingest_versions": {
            ds: d.outcome("dltrain_ingest", ds)["xcom"]["ingest_images"]["version"] for ds in DATES
        },
        "pins": {
            ds: d.outcome("dltrain_retrain", ds)["xcom"]["wait_for_partition"]["version"] for ds in DATES
        },
        "score_versions": {ds: d.outcome("dltrain_retrain", ds)["xcom"]["score"]["version"] for ds in DATES},
        "reports": {key: state["report"] for key, state in d.latest.items()},
        # the log of each nightly run of D2 (the runner rewrites a date's log file when it runs again)
        "logs": {(o.dag_id, o.ds): _read(o.log_path) for o in nightly if o.ds == D2},
    }
    yield d
    d.runner.__exit__(None, None, None)
    if old is None:
        os.environ.pop("DLTRAIN_HOME", None)
    else:
        os.environ["DLTRAIN_HOME"] = old


def _read(path):
    with open(path) as fh:
        return fh.read()


def _spark_wrote(log, ds):
    """Whether a run's log shows a Spark job writing partition ``ds`` (SparkProgress's line)."""
    return f"writing ds={ds} of" in log


def _newest(uri):
    return lake.DeltaLog(uri).latest_version()


def _tables(demo):
    return {
        "digits": _newest(demo.digits),
        "quarantine": _newest(demo.digits + "_quarantine"),
        "predictions": _newest(demo.predictions),
    }


def test_nightly_runs_score_every_date_once_with_the_champion_for_that_date(demo):
    for ds in DATES:
        rows = [json.loads(r) for r in demo.nightly["rows"][ds]]
        assert len(rows) == PER_DAY and len({r["source_file"] for r in rows}) == PER_DAY
        assert {r["model_version"] for r in rows} == {demo.nightly["champions"][ds]}
    assert demo.nightly["live"] == demo.nightly["champions"][DATES[-1]]
    for ds in DATES:  # the backfill report of a first run: everything written for the first time
        for dag in ("dltrain_ingest", "dltrain_retrain"):
            assert demo.nightly["reports"][(dag, ds)]["verdict"] == "computed", demo.nightly["reports"]


def test_rerunning_a_whole_day_twice_with_untouched_landing_files_changes_nothing(demo):
    tables = _tables(demo)
    day = [("dltrain_ingest", D2, None), ("dltrain_retrain", D2, {"hparams": FAST})]
    nightly_logs = demo.nightly["logs"]
    assert all(_spark_wrote(nightly_logs[(dag, D2)], D2) for dag in ("dltrain_ingest", "dltrain_retrain"))
    outcomes = []
    for _ in range(2):  # the whole day, twice, back to back
        ran = demo.run(day)
        for o in ran:  # decided from the facts recorded in the partitions' commits: Spark did nothing
            log = _read(o.log_path)
            assert not _spark_wrote(log, D2) and "no Spark session or job started" in log, o.log_path
        outcomes += ran
    for ingest_run, retrain_run in (outcomes[:2], outcomes[2:]):
        ingest = ingest_run.state["xcom"]["ingest_images"]
        assert ingest["committed"] is False and ingest["version"] == demo.nightly["ingest_versions"][D2]
        assert ingest["skipped"] is True and "unchanged since version" in ingest["reason"]
        assert retrain_run.state["xcom"]["score"]["skipped"] is True
        state = retrain_run.state
        assert state["tasks"]["train"] == "skipped" and state["tasks"]["register"] == "skipped"
        assert state["xcom"]["wait_for_partition"]["version"] == demo.nightly["pins"][D2]
        assert state["xcom"]["score"]["version"] == demo.nightly["score_versions"][D2]
    assert [o.state["report"]["verdict"] for o in outcomes] == ["reproduced"] * 4, outcomes[-1].state[
        "report"
    ]
    assert outcomes[1].state["run_id"] != outcomes[3].state["run_id"]  # two runs, not one read twice
    assert _tables(demo) == tables  # no new version of any table
    assert {ds: _rows(demo.predictions, ds) for ds in DATES} == demo.nightly["rows"]
    assert demo.versions() == demo.nightly["versions"]
    assert demo.live() == demo.nightly["live"]
    assert demo.champions() == demo.nightly["champions"]


def test_backfill_of_d3_reproduces_the_nightly_answer_and_trains_nothing(demo):
    tables = _tables(demo)
    (outcome,) = demo.run([("dltrain_retrain", D3, {"hparams": FAST})])
    state = demo.outcome("dltrain_retrain", D3)
    assert state["tasks"]["train"] == "skipped" and state["tasks"]["register"] == "skipped"
    with open(outcome.log_path) as log:
        assert "unchanged" in log.read()
    assert state["xcom"]["wait_for_partition"]["version"] == demo.nightly["pins"][D3]
    assert state["report"]["verdict"] == "reproduced" and not state["report"]["changes"], state["report"]
    assert _tables(demo) == tables
    assert _rows(demo.predictions, D3) == demo.nightly["rows"][D3]
    assert _files_by_partition(demo.predictions) == demo.nightly["files"]
    assert demo.live() == demo.nightly["live"]
    assert demo.champions() == demo.nightly["champions"]
    assert demo.versions() == demo.nightly["versions"]


def _cut_logs(uri):
    """What delta-rs's log clean-up does to a table with Delta's default retention once it checkpoints:
    every commit file before the newest checkpoint is gone."""
    table = lake.open_table(uri)
    table.create_checkpoint()
    removed = 0
    for version in range(table.version()):
        path = os.path.join(uri, "_delta_log", f"{version:020d}.json")
        if os.path.exists(path):
            os.remove(path)
            removed += 1
    return removed


def test_a_backfill_after_log_retention_removed_the_nightly_commits_still_reproduces(demo):
    tables = _tables(demo)
    for uri in (demo.digits, demo.digits + "_quarantine", demo.predictions):
        assert _cut_logs(uri) > 0
    with pytest.raises(TableNotFoundError):
        lake.open_table(demo.digits, demo.nightly["pins"][D2])  # delta-rs alone cannot read the pin any more
    (outcome,) = demo.run([("dltrain_retrain", D2, {"hparams": FAST})])
    assert "no Spark session or job started" in _read(outcome.log_path)  # decided from the history index
    state = demo.outcome("dltrain_retrain", D2)
    assert state["tasks"]["train"] == "skipped" and state["tasks"]["register"] == "skipped"
    assert state["xcom"]["wait_for_partition"]["version"] == demo.nightly["pins"][D2]
    assert state["xcom"]["score"]["skipped"] is True
    assert state["xcom"]["score"]["version"] == demo.nightly["score_versions"][D2]
    assert state["report"]["verdict"] == "reproduced", state["report"]
    assert _tables(demo) == tables
    assert _rows(demo.predictions, D2) == demo.nightly["rows"][D2]
    assert demo.champions() == demo.nightly["champions"]


def _restate_d2(demo):
    """Fix one label of D2 in the landing zone (the data provider corrected it)."""
    path = os.path.join(demo.paths.landing(), D2, "labels.csv")
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    name, label = rows[1]
    rows[1] = [name, str((int(label) + 1) % 10)]
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return f"{D2}/images/{name}", (int(label) + 1) % 10


def test_restated_d2_then_backfilled_d3_uses_the_restated_rows_and_a_consistent_model(demo):
    before = _tables(demo)
    before_files = _files_by_partition(demo.predictions)
    source_file, fixed_label = _restate_d2(demo)
    # the plan before: the ingest of exactly D2 recomputes, naming the restated input
    plan = _plan(demo, "dltrain_ingest", None)
    assert plan == {ds: "will recompute" if ds == D2 else "will skip" for ds in DATES}, plan
    # the nightly of D2 again (it picks the restatement up), then a backfill of D3
    demo.run([("dltrain_ingest", D2, None)])
    # with D2 restated, every retrain from D2 on trains on other rows; D1 does not
    plan = _plan(demo, "dltrain_retrain", {"hparams": FAST})
    assert plan == {ds: "will skip" if ds == DATES[0] else "will recompute" for ds in DATES}, plan
    demo.run([("dltrain_retrain", D2, {"hparams": FAST}), ("dltrain_retrain", D3, {"hparams": FAST})])
    # what the plan predicted is what the runs did
    assert demo.outcome("dltrain_ingest", D2)["xcom"]["ingest_images"]["committed"] is True
    assert {demo.outcome("dltrain_retrain", ds)["tasks"]["train"] for ds in (D2, D3)} == {"success"}
    ingest = demo.outcome("dltrain_ingest", D2)["xcom"]["ingest_images"]
    restated = ingest["version"]
    assert ingest["committed"] is True and restated == before["digits"] + 1
    assert {
        r["label"] for r in map(json.loads, _rows(demo.digits, D2)) if r["source_file"] == source_file
    } == {fixed_label}

    state = demo.outcome("dltrain_retrain", D3)
    # the backfill of D3 sees the restated D2: pinned to the restatement, trained on it
    assert state["xcom"]["wait_for_partition"]["version"] == restated
    assert state["tasks"]["train"] == "success"
    assert state["xcom"]["train"]["dataset"]["version"] == restated
    register = state["xcom"]["register"]
    champion = demo.champion_version(D3)
    rows = [json.loads(r) for r in _rows(demo.predictions, D3)]
    assert {r["model_version"] for r in rows} == {champion}
    assert {r["input_version"] for r in rows} == {restated}
    mv = demo.tracking.client().get_model_version(MODEL, str(register["version"]))
    assert mv.tags["dltrain.gate.basis"] == "rescored"
    assert json.loads(mv.tags["dltrain.gate.eval_data"])["delta_ref"]["version"] == restated
    if champion == register["version"]:  # the new model won on the restated rows
        assert json.loads(mv.tags["dltrain.delta_ref"])["version"] == restated
    else:  # the champion kept its place after being re-scored on the same (restated) rows
        assert register["compared_with"] == champion
    # later dates were not re-run: their predictions are untouched
    after_files = _files_by_partition(demo.predictions)
    assert after_files[D4] == before_files[D4] and after_files[DATES[0]] == before_files[DATES[0]]
    # lineage of the new D3 predictions names the restatement of D2
    out = demo.lineage(state["xcom"]["score"]["version"])
    assert f"ds={D2}: version {restated}" in out
    # the backfill report: D2 changed, naming the partition; D3 retrained on the restated data
    report = _backfill_report(demo, "dltrain_ingest", DATES[0], D4)
    by_date = {line.split()[0]: line for line in report.splitlines() if line[:4].isdigit()}
    assert by_date[D2].split()[1] == "changed" and by_date[DATES[0]].split()[1] == "computed:", report
    assert f"{demo.digits} partition ds={D2} as version {restated}" in report and "rows changed" in report
    d3 = demo.outcome("dltrain_retrain", D3)["report"]
    assert d3["verdict"] == "changed", d3
    assert any("changed: data (digits version" in c for c in d3["changes"]), d3


def _plan(demo, dag_id, conf):
    """``dltrain backfill-report --plan --json`` of every date: date -> verdict."""
    extra = ["--conf", json.dumps(conf)] if conf else []
    command = ["backfill-report", dag_id, DATES[0], D4, "--plan", "--json", *extra]
    out = subprocess.run(
        [sys.executable, "-m", "airflow_provider_dltrain", *command],
        capture_output=True,
        text=True,
        check=True,
        env=demo.env,
    ).stdout
    dates = json.loads(out)["dates"]
    changed = [c["fact"] for d in dates for t in d["tasks"] for c in t["changes"]]
    assert dag_id != "dltrain_ingest" or changed == ["inputs.labels"], dates
    return {d["ds"]: d["verdict"] for d in dates}


def _backfill_report(demo, dag_id, start, end):
    """``dltrain backfill-report`` against the demo's Airflow DB, tables and MLflow store."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_dltrain", "backfill-report", dag_id, start, end],
        capture_output=True,
        text=True,
        check=True,
        env=demo.env,
    ).stdout


def test_changing_a_hyper_parameter_retrains(demo):
    before = demo.versions()
    demo.run([("dltrain_retrain", D4, {"hparams": {**FAST, "lr": 0.002}})])
    state = demo.outcome("dltrain_retrain", D4)
    assert state["tasks"]["train"] == "success"
    assert len(demo.versions()) == len(before) + 1
    changes = state["report"]["changes"]
    assert any("hyper-parameters (lr 0.003 → 0.002)" in c for c in changes), changes


def test_lineage_command_traces_predictions_back_to_every_ingest_commit(demo):
    out = demo.lineage(demo.nightly["score_versions"][D3])
    champion = demo.nightly["champions"][D3]
    assert f"model {MODEL} version {champion}" in out
    assert "MLflow run " in out and "val_accuracy=" in out
    assert f"trained on {demo.digits} version" in out and "data cut-off" in out
    for ds in DATES[:3]:  # every partition the training data came from, with the commit that wrote it
        assert f"ds={ds}: version {demo.nightly['ingest_versions'][ds]}" in out
    assert "dltrain_ingest /" in out and "ingest_images" in out
    assert f"'ds': '{D3}'" in out


def test_champion_command_prints_the_history_and_the_champion_for_a_date(demo):
    out = subprocess.run(
        [sys.executable, "-m", "airflow_provider_dltrain", "champion", MODEL, "--as-of", D3],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "DLTRAIN_HOME": demo.paths.home()},
    ).stdout
    assert f"champion for {D3}: v{demo.champion_version(D3)}" in out
    assert f"from {DATES[0]}  v{demo.nightly['champions'][DATES[0]]}" in out


def test_a_date_before_the_dags_start_date_fails_naming_the_dag_and_its_start_date(demo):
    (outcome,) = demo.runner.run([("dltrain_ingest", "2026-03-01", None)])
    assert not outcome.ok
    assert "dltrain_ingest" in outcome.tail and "2026-11-01" in outcome.tail and "start_date" in outcome.tail
