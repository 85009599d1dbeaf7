"""Partition values and dates: refused at the door with the column, the value and the rule; never trimmed."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidPartitionError, InvalidSpecError
from airflow_provider_dltrain.lake import overwrite_partition, validate_partition

UNSAFE = [
    "2026-11-28 junk",
    "2026-11-28 OR x",
    "2026-11-28:..",
    "2026/11/28",
    "ds=2026-11-28",
    "2026-11-2*",
    "2026-11-2?",
    "2026-11-28' OR '1'='1",
    '2026-11-28"',
    "2026\\11",
    "2026-11-28%2F",
    "..",
]
UNTRIMMED = [" 2026-11-28 ", " 2026-11-28", "2026-11-28 ", "2026-11-28\n", "\t2026-11-28"]
CONTROL = ["2026-11\x0028", "2026-11-28\x1b[0m"]


@pytest.mark.parametrize("value", UNSAFE + UNTRIMMED + CONTROL)
def test_a_partition_value_unsafe_in_a_directory_name_is_refused_naming_column_and_value(value):
    with pytest.raises(InvalidPartitionError) as err:
        validate_partition({"ds": value})
    assert "['ds']" in str(err.value) and repr(value)[:20] in str(err.value)
    assert isinstance(err.value, DltrainUserError)


@pytest.mark.parametrize("value", UNTRIMMED)
def test_whitespace_around_a_value_is_refused_not_trimmed(value):
    with pytest.raises(InvalidPartitionError, match="never trimmed"):
        validate_partition({"ds": value})


@pytest.mark.parametrize("value", ["2026-11-28", "2026-11-28T05", "v1.2+3", "A_b-c", 7])
def test_plain_values_are_accepted_as_given(value):
    assert validate_partition({"ds": value}) == {"ds": str(value)}


@pytest.mark.parametrize(
    ("fmt", "value"),
    [
        ("date", "2026-02-30"),
        ("date", "2026-11-28T00"),
        ("date", "20261128"),
        ("date", "2026-11-28 junk"),
        (r"[0-9]{4}-[0-9]{2}", "2026-11-28"),
    ],
)
def test_a_value_not_matching_its_declared_format_is_refused_naming_the_format(fmt, value):
    with pytest.raises(InvalidPartitionError) as err:
        validate_partition({"ds": value}, formats={"ds": fmt})
    message = str(err.value)
    assert "'ds'" in message and repr(value) in message and repr(fmt) in message


def test_a_declared_format_never_lets_an_unsafe_character_through():
    assert validate_partition({"ds": "2026-11"}, formats={"ds": ".*"}) == {"ds": "2026-11"}
    with pytest.raises(InvalidPartitionError, match="'/'"):
        validate_partition({"ds": "2026/11"}, formats={"ds": ".*"})


@pytest.mark.parametrize(
    ("formats", "message"),
    [
        ({"ds": "dat"}, "not a known format name"),
        ({"ds": "[0-9"}, "not a valid regular expression"),
        ({"dt": "date"}, "'dt', which is not a partition column"),
        ({"ds": ""}, "is not a format"),
        ("date", "must be a dict"),
    ],
)
def test_an_unusable_format_is_refused(formats, message):
    with pytest.raises(InvalidSpecError, match=message):
        validate_partition({"ds": "2026-11-28"}, formats=formats)


def test_a_refused_partition_value_writes_nothing(tmp_path):
    uri = tmp_path / "events"
    data = pa.table({"x": pa.array([1, 2], pa.int64())})
    for value in (" 2026-11-28 ", "2026-11-28 junk", "2026-11-28:.."):
        with pytest.raises(InvalidPartitionError):
            overwrite_partition(str(uri), data, {"ds": value})
    assert not uri.exists()


@pytest.mark.parametrize(
    "value", ["2026-11-28 junk", " 2026-11-28", "2026-11-28\n", "2026-02-30", "{{ ds }}"]
)
def test_check_date_refuses_anything_but_a_date_naming_the_field(value):
    from airflow_provider_dltrain.lake.partition import check_date

    with pytest.raises(InvalidSpecError, match=r"^data_cutoff="):
        check_date(value, "data_cutoff")


def test_a_comparison_bound_may_hold_a_time_but_is_never_trimmed():
    assert validate_partition({"ds": "2026-11-03T12:00"}, bounds=True) == {"ds": "2026-11-03T12:00"}
    with pytest.raises(InvalidPartitionError, match="never trimmed"):
        validate_partition({"ds": "2026-11-03 "}, bounds=True)
    with pytest.raises(InvalidPartitionError, match="in a bound"):
        validate_partition({"ds": "2026-11-03' OR '1'='1"}, bounds=True)
