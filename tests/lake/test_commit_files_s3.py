from __future__ import annotations

import pyarrow as pa

from airflow_provider_dltrain import lake


def test_partition_overwrite_and_version_reads_work_on_s3_through_the_moto_server(s3_bucket):
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/tables/t"
    lake.overwrite_partition(uri, pa.table({"x": [1, 2]}), {"ds": "2026-11-27"}, storage_options=options)
    ref = lake.overwrite_partition(uri, pa.table({"x": [3]}), {"ds": "2026-11-28"}, storage_options=options)
    lake.overwrite_partition(uri, pa.table({"x": [4]}), {"ds": "2026-11-28"}, storage_options=options)
    assert ref.version == 1
    assert lake.latest(uri, options).version == 2
    assert lake.has_partition(uri, 1, {"ds": "2026-11-28"}, options)
    assert not lake.has_partition(uri, 0, {"ds": "2026-11-28"}, options)
    rows = lake.open_table(uri, None, options).to_pyarrow_table().to_pylist()
    assert sorted((r["ds"], r["x"]) for r in rows) == [
        ("2026-11-27", 1),
        ("2026-11-27", 2),
        ("2026-11-28", 4),
    ]
