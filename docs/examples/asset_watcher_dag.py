"""A DAG scheduled on new versions of a Delta table (an AssetWatcher), not on the clock."""

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_dltrain.triggers import DeltaTableNewVersionTrigger

events = Asset(
    "lake_events",
    uri="s3://lake/events",
    watchers=[
        AssetWatcher(
            name="lake_events_versions",
            trigger=DeltaTableNewVersionTrigger(
                table_uri="s3://lake/events",
                from_version=None,  # None: versions committed after the first look; an int: from there
                aws_conn_id="aws_lake",
                poll_interval=60,
            ),
        )
    ],
)

with DAG(dag_id="on_new_events", schedule=[events], catchup=False):

    @task
    def process(triggering_asset_events=None):
        for event in triggering_asset_events[events]:
            ref = event.extra["payload"]["ref"]  # {"uri", "version", "timestamp"}: one exact version
            print(ref)

    process()
