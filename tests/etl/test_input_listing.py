"""Listing fingerprints of raw inputs (S3: key, size and ETag of every object; local: every match of a pattern), nothing read."""

from __future__ import annotations

import boto3

from airflow_provider_dltrain.etl.input_listing import listing_fingerprint


def test_an_s3_listing_changes_with_the_objects_and_not_with_an_identical_upload(s3_bucket):
    bucket, options = s3_bucket
    s3 = boto3.client(
        "s3",
        endpoint_url=options["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.put_object(Bucket=bucket, Key="landing/d/a.csv", Body=b"id\n1\n")
    s3.put_object(Bucket=bucket, Key="landing/d/b.csv", Body=b"id\n2\n")
    s3.put_object(Bucket=bucket, Key="landing/d2/other.csv", Body=b"id\n3\n")  # beside the prefix: not listed
    uri = f"s3://{bucket}/landing/d"
    first = listing_fingerprint(uri, options)
    assert first is not None and first.files == 2
    s3.put_object(Bucket=bucket, Key="landing/d/a.csv", Body=b"id\n1\n")  # the same bytes again
    assert listing_fingerprint(uri, options) == first
    s3.put_object(Bucket=bucket, Key="landing/d/a.csv", Body=b"id\n9\n")  # same size, other bytes
    changed = listing_fingerprint(uri, options)
    assert changed is not None and changed.hash != first.hash
    single = listing_fingerprint(f"{uri}/b.csv", options)
    assert single is not None and single.files == 1
    assert listing_fingerprint(f"s3://{bucket}/landing/missing", options) is None


def test_a_listing_of_brace_alternatives_and_globs_counts_hidden_names_on_every_python(tmp_path, monkeypatch):
    import sys

    for name in ("a/x.csv", "b/y.csv"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x\n1\n")
    monkeypatch.setattr(sys, "version_info", (3, 10, 12))  # glob drops hidden names there
    braces, glob = f"{tmp_path}/{{a,b}}", f"{tmp_path}/*/*.csv"
    before = {p: listing_fingerprint(p) for p in (braces, glob)}
    assert before[braces] is not None and before[braces].files == 2
    (tmp_path / "b" / ".late.csv").write_text("x\n2\n")  # refused and quarantined: it must count
    after = {p: listing_fingerprint(p) for p in (braces, glob)}
    assert all(after[p].files == 3 and after[p].hash != before[p].hash for p in (braces, glob))
