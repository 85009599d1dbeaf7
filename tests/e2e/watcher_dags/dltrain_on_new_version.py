"""A DAG scheduled on new versions of a Delta table through an AssetWatcher (used by the e2e test)."""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import Asset, AssetWatcher, dag, task

from airflow_provider_dltrain.triggers import DeltaTableNewVersionTrigger

TABLE = os.environ.get("DLTRAIN_WATCHED_TABLE", "/tmp/dltrain-watched-table")
RECORD = os.environ.get("DLTRAIN_WATCHED_RECORD", "/tmp/dltrain-watched-record")

events = Asset(
    "dltrain_watched_events",
    uri=f"file://{TABLE}",
    watchers=[
        AssetWatcher(
            name="dltrain_watched_events_versions",
            trigger=DeltaTableNewVersionTrigger(
                table_uri=TABLE, from_version=0, aws_conn_id=None, poll_interval=2.0
            ),
        )
    ],
)


@dag(
    dag_id="dltrain_on_new_version",
    schedule=[events],
    catchup=False,
    is_paused_upon_creation=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
)
def dltrain_on_new_version():
    @task
    def record(triggering_asset_events=None, run_id=None) -> list[int]:
        """Write the versions this run was triggered for to one file per run (a retry rewrites it)."""
        versions = [e.extra["payload"]["version"] for e in triggering_asset_events[events]]
        os.makedirs(RECORD, exist_ok=True)
        with open(os.path.join(RECORD, f"{run_id}.txt".replace(":", "_")), "w") as out:
            out.writelines(f"{v}\n" for v in versions)
        return versions

    record()


dltrain_on_new_version()
