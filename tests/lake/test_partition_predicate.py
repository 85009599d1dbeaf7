"""Which partitions a filter can select, from the values a commit records: compared in the column's type.

The one predicate behind a pinned read after log clean-up, lineage and the index fingerprints. A
"no" drops a partition from what a reader checks, so it is given only when it is exact; anything
undecidable is "may select".
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from airflow_provider_dltrain.lake.filters import (
    compare_partition_value,
    dnf_may_select,
    dnf_selector,
    parse_partition_value,
    partition_may_select,
    partition_types,
)

INT = {"h": "integer"}


@pytest.mark.parametrize("delta_type", ["byte", "short", "integer", "long"])
def test_integer_partitions_compare_as_numbers_not_text(delta_type):
    types = {"h": delta_type}
    assert partition_may_select({"h": "2"}, [("h", "<", 10)], types)  # "2" < "10" is false as text
    assert not partition_may_select({"h": "10"}, [("h", "<", 10)], types)
    assert partition_may_select({"h": "9"}, [["h", "<=", "10"]], types)  # a rendered template value
    assert not partition_may_select({"h": "-3"}, [("h", ">", -1)], types)


@pytest.mark.parametrize(
    ("delta_type", "text", "op", "value", "expected"),
    [
        ("date", "2026-01-02", "<", "2026-01-10", True),
        ("date", "2026-01-10", "<", date(2026, 1, 2), False),
        ("timestamp", "2026-01-01 06:30:01.000005", ">", "2026-01-01 06:30:01", True),
        ("timestamp", "2026-01-01 05:00:00.000000", "<", datetime(2026, 1, 1, 6, tzinfo=timezone.utc), True),
        ("timestamp", "2026-01-01 05:00:00", "=", "2026-01-01T07:00:00+02:00", True),  # the same instant
        ("timestamp_ntz", "2026-01-01 06:00:00.000000", "<=", datetime(2026, 1, 1, 5, 59), False),
        ("decimal(5,2)", "1.50", "=", Decimal("1.5"), True),
        ("decimal(5,2)", "10.25", "<", "9.99", False),
        ("boolean", "true", "=", True, True),
        ("boolean", "false", "!=", "false", False),
        ("string", "b", "<", "ab", False),
        ("integer", "10", "in", [2, "10"], True),
        ("integer", "10", "not in", ["10"], False),
        ("date", "2026-01-10", "in", ["2026-01-02"], False),
    ],
)
def test_each_supported_type_compares_its_values_by_meaning(delta_type, text, op, value, expected):
    assert compare_partition_value(text, delta_type, op, value) is expected


@pytest.mark.parametrize(
    ("text", "delta_type", "op", "value"),
    [
        (None, "integer", "=", 1),  # a null partition value
        ("1.5", "double", "<", 2),  # a type not compared here
        ("2", "integer", "like", "2%"),  # an operator not compared here
        ("2", "integer", "<", "ten"),  # a value that is not of the column's type
        ("2", "integer", "<", True),
        ("2026-01-01 00:00:00", "timestamp_ntz", "<", datetime(2026, 1, 2, tzinfo=timezone.utc)),
        ("2", None, "<", 10),  # the column's type unknown
        ("2", "integer", "in", 2),  # "in" without a list
    ],
)
def test_what_cannot_be_decided_exactly_is_undecided(text, delta_type, op, value):
    assert compare_partition_value(text, delta_type, op, value) is None
    values = {"h": text}
    assert partition_may_select(values, [("h", op, value)], {"h": delta_type} if delta_type else None)


def test_a_conjunction_excludes_only_when_one_predicate_is_proven_false_and_an_or_needs_all_excluded():
    types = {"h": "integer", "ds": "date"}
    values = {"h": "2", "ds": "2026-01-05"}
    assert not partition_may_select(values, [("h", ">", 5), ("ds", "<", "2026-02-01")], types)
    assert partition_may_select(values, [("x", ">", 5), ("ds", "<", "2026-02-01")], types)  # x: a row column
    assert partition_may_select(values, [[("h", ">", 5)], [("ds", "=", "2026-01-05")]], types)
    assert not partition_may_select(values, [[("h", ">", 5)], [("ds", "!=", "2026-01-05")]], types)
    assert partition_may_select(values, [], types) and partition_may_select(values, None, types)


def test_a_malformed_filter_may_select_leaving_its_refusal_to_the_reader():
    assert partition_may_select({"h": "2"}, [("h", "~", 1)], INT)


def test_partition_values_parse_as_delta_rs_writes_them():
    assert parse_partition_value("2026-01-01 06:30:01.000005", "timestamp") == datetime(
        2026, 1, 1, 6, 30, 1, 5, tzinfo=timezone.utc
    )
    assert parse_partition_value("-7", "long") == -7
    with pytest.raises(ValueError):
        parse_partition_value("7.0", "long")


def test_partition_types_come_from_the_schema_string():
    schema = '{"type":"struct","fields":[{"name":"h","type":"integer"},{"name":"x","type":"long"}]}'
    assert partition_types(schema, ["h"]) == {"h": "integer"}
    assert partition_types(schema, ["missing"]) is None and partition_types("not json", ["h"]) is None


def test_a_cutoff_on_an_int_partition_column_counts_h_9_as_before_h_10(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    from airflow_provider_dltrain.lake import history

    uri = str(tmp_path / "t")
    for h in (9, 10, 11):
        write_deltalake(
            uri, pa.table({"h": pa.array([h], pa.int32()), "x": [h]}), partition_by=["h"], mode="append"
        )
    write_deltalake(
        uri,
        pa.table({"h": pa.array([9], pa.int32()), "x": [90]}),
        partition_by=["h"],
        mode="overwrite",
        predicate="h = 9",
    )  # version 3 restates h=9: a cut-off at h <= 10 must see it (as text "9" > "10")
    assert history.cutoff_commit(uri, {"h": "10"}).version == 3
    assert [c["partition"] for c in history.partition_commits(uri, None, {"h": "10"})] == [
        {"h": "10"},
        {"h": "9"},
    ]


_TEXTS = st.sampled_from(
    ["2", "10", "-3", "007", "2026-01-02", "2026-01-02 03:04:05", "abc", "1.5", "true", ""]
)
_VALUES = st.one_of(
    _TEXTS,
    st.integers(-20, 20),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
    st.dates(min_value=date(2025, 12, 30), max_value=date(2026, 1, 3)),
    st.lists(_TEXTS | st.integers(-5, 12), max_size=3),
)
_TYPES = st.sampled_from(
    ["string", "integer", "long", "date", "timestamp", "timestamp_ntz", "boolean", "decimal(5,1)", "binary"]
)
_OPS = st.sampled_from(["=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"])


@given(
    dnf=st.lists(
        st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), _OPS, _VALUES), min_size=1, max_size=3),
        max_size=3,
    ),
    types=st.dictionaries(st.sampled_from(["a", "b"]), _TYPES),
    partitions=st.lists(
        st.dictionaries(st.sampled_from(["a", "b"]), st.none() | _TEXTS), min_size=1, max_size=6
    ),
)
@example(  # an operand that does not convert, before any match: undecided, so "may select"
    dnf=[[("a", "in", ["abc", 5])]], types={"a": "integer"}, partitions=[{"a": "2"}, {"a": "5"}]
)
@example(dnf=[[("a", "<", "2026-01-02")]], types={"a": "date"}, partitions=[{"a": "2026-01-01"}, {"a": "x"}])
@settings(max_examples=600, deadline=None)
def test_the_selector_a_loop_compiles_once_decides_as_each_partition_alone(dnf, types, partitions):
    """index_fingerprint and the re-run facts compile the filter once for every partition of a table."""
    normal = tuple(tuple(conj) for conj in dnf)
    selects = dnf_selector(normal, types)
    for values in partitions:  # the same selector for every partition, its parses kept between them
        assert selects(values) == dnf_may_select(values, normal, types), (values, normal, types)


@given(
    op=_OPS,
    value=_VALUES,
    delta_type=st.none() | _TYPES,
    texts=st.lists(st.none() | _TEXTS, min_size=1, max_size=6),
)
@settings(max_examples=400, deadline=None)
def test_a_compiled_term_decides_as_the_comparison_of_each_text_alone(op, value, delta_type, texts):
    """The cut-off pin compiles its bound once for every partition of a year's history."""
    from airflow_provider_dltrain.lake.filters import compiled_term

    term = compiled_term(op, value, delta_type)
    for text in texts:
        assert term(text) == compare_partition_value(text, delta_type, op, value), (text, op, value)


def test_a_validated_partition_is_frozen_and_every_later_check_returns_it_as_it_is():
    import json
    import pickle

    from airflow_provider_dltrain.exceptions import InvalidPartitionError
    from airflow_provider_dltrain.lake.partition import Partition, validate_partition

    spec = validate_partition({"ds": "2026-11-28"})
    assert isinstance(spec, Partition) and spec == {"ds": "2026-11-28"}
    assert validate_partition(spec) is spec  # validated once, where it entered
    assert validate_partition(spec, formats={"ds": "date"}) == spec  # a declared format is still checked
    with pytest.raises(InvalidPartitionError):
        validate_partition(spec, formats={"ds": r"[0-9]{8}"})
    with pytest.raises(TypeError, match="frozen"):
        spec["ds"] = "2026-11-29"
    with pytest.raises(TypeError, match="frozen"):
        spec.update(ds="2026-11-29")
    assert json.dumps(spec) == '{"ds": "2026-11-28"}' and pickle.loads(pickle.dumps(spec)) == spec
    assert type(validate_partition({"ds": "2026-11-28 12:00"}, bounds=True)) is dict  # a bound is no name
