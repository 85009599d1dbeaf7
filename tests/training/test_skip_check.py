"""The training skip rule (``training.skip_check``) on a real Delta table and MLflow on SQLite, no training."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

from airflow_provider_dltrain.lake.ref import DeltaRef
from airflow_provider_dltrain.store.config import TrackingConfig
from airflow_provider_dltrain.training.runner import IDENTITY_TAGS, run_identity
from airflow_provider_dltrain.training.skip_check import check_training

FN = "benchmarks.year_model:train"
HP = {"epochs": 1}


def test_a_version_already_gated_for_that_cutoff_with_the_same_inputs_skips_and_no_other_cutoff_does(
    tmp_path,
):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"ds": ["2026-03-01", "2026-03-02"], "x": [1.0, 2.0]}), partition_by=["ds"])
    ref = DeltaRef(uri, 0)
    tracking = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = tracking.client()
    client.create_registered_model("m")
    for cutoff in ("2026-03-01", "2026-03-02"):
        identity = run_identity(FN, ref, HP, [["ds", "<=", cutoff]])
        tags = {t: identity[t] for t in IDENTITY_TAGS}
        gate = {"dltrain.gate.decision": "rejected", "dltrain.gate.reason": "not better"}
        client.create_model_version(
            "m", "file:///nowhere", tags={**tags, "dltrain.data_cutoff": cutoff, **gate}
        )

    def check(cutoff):
        return check_training(
            tracking, "m", FN, ref, HP, data_filter=[["ds", "<=", cutoff]], data_cutoff=cutoff
        )

    judged = check("2026-03-02")
    assert (
        judged.skipped
        and "v2, registered for cut-off 2026-03-02 and rejected by the gate" in judged.skip_reason
    )
    # same month, other cut-off: the versions of 03-01 and 03-02 are not its own, so it trains
    later = check("2026-03-03")
    assert not later.skipped and later.champion is None and "no champion for cut-off 2026-03-03" in later.note
