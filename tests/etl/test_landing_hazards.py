"""Hostile landing zones: every landed file ends in the table or in quarantine with a reason, or the
task fails once, as a user error naming the file, before Spark reads it.

Most checks run before Spark (``etl.landing_files``), so they are tested with a Spark stand-in that
fails on any use; one end-to-end write covers what reaches the tables.
"""

from __future__ import annotations

import csv
import os
import shutil
import struct
import subprocess
import sys
import zlib
from types import SimpleNamespace

import pytest

from airflow_provider_dltrain import lake
from airflow_provider_dltrain.demo.digits_etl import decode_digits
from airflow_provider_dltrain.demo.seed import seed_day
from airflow_provider_dltrain.etl import read_inputs, run_transform, write_dataframe
from airflow_provider_dltrain.etl.landing_files import (
    GLOB_NAME,
    HADOOP_NAME,
    HIDDEN,
    SYMLINK,
    check_line_lengths,
    list_landing,
    oversized,
    refused_files,
)
from airflow_provider_dltrain.exceptions import DltrainUserError, InvalidSpecError, LandingFileError

DS = "2026-11-24"
SECRET = "root:x:0:0:SECRET-LINE-OF-THE-TARGET"
HUGE = 13_000  # a 13000x13000 RGBA PNG: ~650 KB of file, 645 MiB once decoded


class NoSpark:
    """A Spark stand-in: any use means a check came too late."""

    def __getattr__(self, name):
        raise AssertionError(f"Spark was used ({name}) before the landing checks refused the input")


def _inputs(landing, **labels):
    return {
        "images": {
            "path": f"{landing}/{DS}/images",
            "format": "binaryFile",
            "options": {"pathGlobFilter": "*.png"},
        },
        "labels": {"path": f"{landing}/{DS}/labels.csv", "format": "csv", **labels},
    }


def _labels(landing, **options):
    return {"labels": _inputs(landing, **options)["labels"]}


def _huge_png(path: str, side: int = HUGE) -> None:
    """A valid ``side`` x ``side`` RGBA PNG of zeros (side a multiple of 100), built in a second.

    Its zlib stream is one compressed block of 100 zero rows repeated: after a full flush the
    compressor starts afresh, so every block compresses to the same bytes. The Adler-32 checksum
    at the end is computed over the whole image, so a decoder reads it as any PNG.
    """

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    block = b"\0" * (1 + 4 * side) * 100
    packer = zlib.compressobj(9)
    first = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    adler = 1
    for _ in range(side // 100):
        adler = zlib.adler32(block, adler)
    idat = first + again * (side // 100 - 1) + packer.flush()[:-4] + struct.pack(">I", adler)
    with open(path, "wb") as fh:
        fh.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 6, 0, 0, 0)))
        fh.write(chunk(b"IDAT", idat) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def huge_png(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("huge") / "huge.png")
    _huge_png(path)
    return path


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """Files outside the landing zone a link may point at: a secret text file and a good digit PNG."""
    folder = tmp_path_factory.mktemp("outside")
    (folder / "passwd").write_text(SECRET + "\nbin:x:1:1\n")
    return folder


def _day(root, labels_rows=()):
    day = seed_day(str(root), DS, per_day=4)
    with open(os.path.join(day.path, "labels.csv"), "a", newline="") as fh:
        csv.writer(fh).writerows(labels_rows)
    return day.path


def _assert_no_leak(text: str, outside) -> None:
    assert SECRET not in text and "bin:x" not in text and str(outside) not in text


def test_a_line_over_the_limit_fails_as_a_user_error_naming_file_line_and_limit_before_spark(tmp_path):
    day = _day(tmp_path)
    labels = os.path.join(day, "labels.csv")
    with open(labels) as fh:
        line = len(fh.readlines()) + 1
    with open(labels, "a") as fh:
        fh.write("img_0000.png," + "9" * (1 << 20) + "\n")  # just over 1 MiB with the file name
    with pytest.raises(LandingFileError) as err:
        read_inputs(NoSpark(), _labels(tmp_path))
    message = str(err.value)
    assert isinstance(err.value, DltrainUserError)  # never retried
    assert message.startswith(f"input 'labels': {labels} line {line} is longer than max_line_bytes=1048576")
    assert "9999" not in message


def test_max_line_bytes_is_an_input_option_checked_before_anything_runs(tmp_path):
    day = _day(tmp_path)
    with pytest.raises(LandingFileError, match=r"labels.csv line 2 is longer than max_line_bytes=12 "):
        read_inputs(NoSpark(), _labels(tmp_path, max_line_bytes=12))
    check_line_lengths(os.path.join(day, "labels.csv"), 64)  # within a larger limit: no error
    with pytest.raises(InvalidSpecError, match=r"inputs\['labels'\]\.max_line_bytes must be a positive"):
        read_inputs(NoSpark(), _labels(tmp_path, max_line_bytes="0"))


def test_labels_linked_outside_the_landing_zone_fail_without_reading_or_naming_the_target(
    tmp_path, outside, caplog
):
    day = _day(tmp_path)
    labels = os.path.join(day, "labels.csv")
    os.remove(labels)
    os.symlink(outside / "passwd", labels)
    with pytest.raises(LandingFileError) as err:
        read_inputs(NoSpark(), _labels(tmp_path))
    assert str(err.value).startswith(f"input 'labels': {labels}: {SYMLINK}")
    _assert_no_leak(str(err.value), outside)
    _assert_no_leak(caplog.text, outside)


def test_a_name_hadoop_cannot_hold_is_refused_for_spark_read_formats_and_read_for_binary_files(tmp_path):
    folder = tmp_path / "csvs"
    folder.mkdir()
    (folder / "a:b.csv").write_text("x\n1\n")
    (folder / "ok.csv").write_text("x\n2\n")
    csvs = list_landing(str(folder))
    assert [os.path.basename(f) for f in csvs.files] == ["ok.csv"]
    assert [(os.path.basename(r.path), r.reason) for r in csvs.refused] == [("a:b.csv", HADOOP_NAME)]
    assert [os.path.basename(f) for f in list_landing(str(folder), spark_reads=False).files] == [
        "a:b.csv",
        "ok.csv",
    ]
    with pytest.raises(LandingFileError, match=r"input 'one': .*/a:b.csv: name holds ':'"):
        read_inputs(NoSpark(), {"one": {"path": str(folder / "a:b.csv"), "format": "csv"}})


def test_a_huge_png_is_refused_from_its_header_and_the_worker_stays_under_300_mib(huge_png):
    assert os.path.getsize(huge_png) < 2 << 20
    probe = (
        "import sys\n"
        "from airflow_provider_dltrain.demo.digits_etl import decode_png\n"
        "pixels, reason = decode_png(open(sys.argv[1], 'rb').read(), 8)\n"
        "print(reason)\n"
        # this process's own peak: ru_maxrss carries the parent's over fork and exec on Linux (a
        # pytest worker holding Spark is past 1 GiB), VmHWM belongs to the new address space
        "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, huge_png], capture_output=True, text=True, check=True)
    reason, peak = out.stdout.splitlines()
    peak_mib = int(peak) / 1024  # kB
    assert reason == f"image is {HUGE}x{HUGE} ({HUGE * HUGE} pixels), over max_pixels=16777216"
    assert peak_mib < 300, f"decoding the header alone took the worker to {peak_mib:.0f} MiB"


def test_every_landed_file_ends_in_the_table_or_in_quarantine_with_a_reason(
    spark, tmp_path, outside, huge_png, caplog
):
    images = os.path.join(_day(tmp_path, [["a:b.png", "3"], ["link.png", "1"], ["huge.png", "2"]]), "images")
    shutil.copy(os.path.join(images, "img_0000.png"), os.path.join(images, "a:b.png"))
    shutil.copy(os.path.join(images, "img_0001.png"), os.path.join(images, ".hidden.png"))
    shutil.copy(os.path.join(images, "img_0002.png"), os.path.join(images, "_partial.png"))
    shutil.copy(os.path.join(images, "img_0003.png"), outside / "digit.png")
    os.symlink(outside / "digit.png", os.path.join(images, "link.png"))  # a good digit, outside
    shutil.copy(huge_png, os.path.join(images, "huge.png"))
    landed = sorted(os.listdir(images))
    uri = str(tmp_path / "digits")

    with caplog.at_level("WARNING"):
        df = run_transform(spark, decode_digits, read_inputs(spark, _inputs(tmp_path)), {})
        result = write_dataframe(df, uri, {"ds": DS}, max_bad_fraction=0.9)

    good = [r["source_file"].rsplit("/", 1)[-1] for r in lake.open_table(uri).to_pyarrow_table().to_pylist()]
    bad = lake.open_table(f"{uri}_quarantine").to_pyarrow_table().to_pylist()
    reasons = {r["source_file"].rsplit("/", 1)[-1]: r["reason"] for r in bad}
    assert sorted(good + list(reasons)) == landed and len(good) + len(bad) == len(landed)
    assert result.rows_written + result.rows_quarantined == len(landed)
    assert "a:b.png" in good  # a name Hadoop rejects is read, not refused
    assert reasons[".hidden.png"] == reasons["_partial.png"] == HIDDEN
    assert reasons["link.png"] == SYMLINK
    assert reasons["huge.png"].startswith(f"image is {HUGE}x{HUGE} (")
    for name in (".hidden.png", "_partial.png", "link.png"):  # listed as skipped in the task log
        assert f"'{images}/{name}': " in caplog.text
    _assert_no_leak(caplog.text + repr(bad), outside)
    assert "digit.png" not in caplog.text + repr(bad)


class RecordingSpark:
    """Spark's reader API recording what each read is handed (paths, options); it reads nothing."""

    sparkContext = SimpleNamespace(defaultParallelism=2)

    def __init__(self):
        self.loads = []

    @property
    def read(self):
        return _Reader(self)

    def createDataFrame(self, rows, schema):
        return SimpleNamespace(rows=rows)


class _Reader:
    def __init__(self, spark):
        self.spark, self.settings = spark, {}

    def format(self, fmt):
        self.settings["format"] = fmt
        return self

    def options(self, **options):
        self.settings.update(options)
        return self

    def option(self, key, value):
        self.settings[key] = value
        return self

    def load(self, paths):
        self.spark.loads.append((paths, dict(self.settings)))
        return SimpleNamespace(paths=paths)


def _loaded(spark: RecordingSpark) -> dict[str, str]:
    """What the one read was handed: an explicit list of files, by name, with their content."""
    ((paths, _),) = spark.loads
    assert isinstance(paths, list), f"Spark was handed {paths!r}, not a list of files"
    assert all(os.path.isfile(p) for p in paths)
    return {os.path.basename(p): open(p).read() for p in paths}


def _csvs(folder, **files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_spark_is_handed_the_checked_files_never_the_folder(tmp_path):
    folder = _csvs(tmp_path / "day", **{"a.csv": "x\n1\n", "b.csv": "x\n2\n"})
    spark = RecordingSpark()
    read_inputs(spark, {"t": {"path": str(folder), "format": "csv"}})
    assert _loaded(spark) == {"a.csv": "x\n1\n", "b.csv": "x\n2\n"}


def test_brace_alternatives_are_expanded_and_each_match_checked_like_any_path(tmp_path, outside):
    _csvs(tmp_path / "day" / "a", **{"x.csv": "x\n1\n"})
    b = _csvs(tmp_path / "day" / "b", **{".h.csv": "x\n2\n"})
    os.symlink(outside / "passwd", b / "y.csv")
    spark = RecordingSpark()
    df = read_inputs(spark, {"t": {"path": f"{tmp_path}/day/{{a,b}}", "format": "csv"}})["t"]
    assert _loaded(spark) == {"x.csv": "x\n1\n"}
    assert [(r.path, r.reason) for r in refused_files(df)] == [
        (f"{b}/.h.csv", HIDDEN),
        (f"{b}/y.csv", SYMLINK),
    ]
    with pytest.raises(InvalidSpecError, match=r"a '\{' with no '\}' after it"):
        read_inputs(RecordingSpark(), {"t": {"path": f"{tmp_path}/day/{{a,b", "format": "csv"}})


def _swap_for_link_after_listing(monkeypatch, folder, target):
    """Replace ``folder`` with a link to ``target`` right after the landing zone was listed."""
    from airflow_provider_dltrain.etl import landing_files

    listed = landing_files.list_landing

    def list_then_swap(*args, **kwargs):
        landing = listed(*args, **kwargs)
        shutil.rmtree(folder)
        os.symlink(target, folder)
        return landing

    monkeypatch.setattr(landing_files, "list_landing", list_then_swap)


def test_a_sub_folder_swapped_for_a_link_after_listing_is_not_read_through(tmp_path, outside, monkeypatch):
    day = tmp_path / "day"
    _csvs(day / "sub", **{"passwd": "x\n1\n"})  # the name the outside file has
    _swap_for_link_after_listing(monkeypatch, day / "sub", outside)
    spark = RecordingSpark()
    with pytest.raises(
        LandingFileError, match=r"sub/passwd: a folder on its path, .* is a symbolic link now"
    ):
        read_inputs(spark, {"t": {"path": str(day), "format": "csv"}})
    assert spark.loads == []


def test_a_sub_folder_swapped_for_a_link_after_listing_gives_binary_workers_no_byte_of_it(
    spark, tmp_path, outside, monkeypatch
):
    images = tmp_path / "images"
    _csvs(images / "sub", **{"passwd": "not a secret"})
    _swap_for_link_after_listing(monkeypatch, images / "sub", outside)
    df = read_inputs(spark, {"i": {"path": str(images), "format": "binaryFile"}})["i"]
    with pytest.raises(Exception, match="is a symbolic link now") as err:
        df.collect()
    _assert_no_leak(str(err.value), outside)


def test_csv_multiline_and_linesep_records_are_held_to_the_line_limit(tmp_path):
    quoted = 'id,text\n1,"' + "short line\n" * 20 + '"\n'  # one record of 20 short lines
    folder = _csvs(tmp_path / "day", **{"a.csv": quoted})
    spec = {"path": str(folder), "format": "csv", "max_line_bytes": 100}
    read_inputs(RecordingSpark(), {"t": spec})  # line by line, every line is short
    with pytest.raises(LandingFileError, match=r"a.csv record 2 is longer than max_line_bytes=100 "):
        read_inputs(NoSpark(), {"t": {**spec, "options": {"multiLine": "true"}}})
    escaped = 'id,text\n1,"a \\" quote\nand a line"\n2,b\n'  # an escaped quote does not end the field
    _csvs(folder, **{"a.csv": escaped})
    read_inputs(RecordingSpark(), {"t": {**spec, "max_line_bytes": 30, "options": {"multiLine": "true"}}})
    _csvs(folder, **{"a.csv": "x\n" + "1\n" * 100})  # no '|' at all: one record of 200 bytes
    with pytest.raises(LandingFileError, match=r"a.csv line 1 is longer than max_line_bytes=100 "):
        read_inputs(NoSpark(), {"t": {**spec, "options": {"lineSep": "|"}}})


def test_a_file_over_max_file_bytes_is_quarantined_with_its_reason_and_the_rest_read(tmp_path):
    folder = _csvs(tmp_path / "day", **{"a.csv": "x\n1\n", "big.csv": "x\n" + "1\n" * 40})
    spark = RecordingSpark()
    df = read_inputs(spark, {"t": {"path": str(folder), "format": "csv", "max_file_bytes": 64}})["t"]
    assert _loaded(spark) == {"a.csv": "x\n1\n"}
    assert [(r.path, r.reason) for r in refused_files(df)] == [(f"{folder}/big.csv", oversized(82, 64))]
    assert (
        oversized(82, 64)
        == "file is 82 bytes, over max_file_bytes=64: not read (raise the input's max_file_bytes)"
    )
    with pytest.raises(InvalidSpecError, match=r"inputs\['t'\]\.max_file_bytes must be a positive number"):
        read_inputs(NoSpark(), {"t": {"path": str(folder), "format": "csv", "max_file_bytes": -1}})


@pytest.mark.parametrize("version", [(3, 10, 12), sys.version_info])
def test_hidden_names_a_glob_matches_are_refused_alike_on_python_3_10_and_later(
    tmp_path, monkeypatch, version
):
    _csvs(tmp_path / "day", **{"a.csv": "x\n", ".h.csv": "x\n", "_p.csv": "x\n"})
    _csvs(tmp_path / "day" / ".tmp", **{"a.csv": "x\n"})
    monkeypatch.setattr(sys, "version_info", version)
    flat = list_landing(f"{tmp_path}/day/*.csv")
    nested = list_landing(f"{tmp_path}/*/a.csv")
    monkeypatch.undo()
    assert [os.path.basename(f) for f in flat.files] == ["a.csv"]
    assert [(os.path.basename(r.path), r.reason) for r in flat.refused] == [
        (".h.csv", HIDDEN),
        ("_p.csv", HIDDEN),
    ]
    nested_all = list_landing(f"{tmp_path}/*/*/a.csv")
    assert [r.path for r in nested_all.refused] == [f"{tmp_path}/day/.tmp/a.csv"]
    assert nested.files == (f"{tmp_path}/day/a.csv",)


def test_refused_landing_files_reach_the_quarantine_table_whatever_the_transform(spark, tmp_path, outside):
    folder = _csvs(tmp_path / "day", **{"a.csv": "id,x\n1,1.5\n2,2.5\n", ".b.csv": "id,x\n3,3.5\n"})
    os.symlink(outside / "passwd", folder / "c.csv")
    uri = str(tmp_path / "t")

    def passthrough(spark, inputs, params):  # knows nothing of refused files
        return inputs["raw"]

    frames = read_inputs(spark, {"raw": {"path": str(folder), "format": "csv"}})
    result = write_dataframe(run_transform(spark, passthrough, frames, {}), uri, {"ds": DS})
    quarantine = lake.open_table(f"{uri}_quarantine").to_pyarrow_table().to_pylist()
    assert sorted((r["source_file"], r["reason"]) for r in quarantine) == [
        (f"{folder}/.b.csv", HIDDEN),
        (f"{folder}/c.csv", SYMLINK),
    ]
    assert result.rows_written == 2 and result.rows_quarantined == 2  # max_bad_fraction=0 still commits
    _assert_no_leak(repr(quarantine), outside)


@pytest.mark.parametrize(
    ("text", "options", "verdict"),
    [
        (b"ab||cdefgh||ij", {"lineSep": "||"}, "line 2"),  # 6 bytes: the second record is too long
        (b"ab||cdefg||ij", {"lineSep": "||"}, None),
        (b'x\n"a\nb\nc"\nd\n', {"multiLine": "true"}, "record 2"),  # a quoted field of 7 bytes
        (b'x\n"\\"\n"abcd\n', {"multiLine": "true"}, "record 2"),  # an escaped quote leaves it open
        (b'x\n""""\nd\n', {"multiLine": "true"}, None),  # doubled quotes: open and shut
        (b'x\n"ab\n"\ncdefgh\n', {"multiLine": "true"}, "record 3"),  # "ab\n" closes: 6 bytes next
    ],
)
def test_a_record_is_measured_the_same_whatever_the_chunks_it_arrives_in(text, options, verdict):
    from airflow_provider_dltrain.etl.landing_reads import RecordRule, RecordScanner

    rule = RecordRule.of("csv", options)
    for size in range(1, len(text) + 1):
        scanner = RecordScanner("f.csv", 5, rule)
        try:
            for at in range(0, len(text), size):
                scanner.feed(text[at : at + size])
            scanner.feed(b"", eof=True)
            found = None
        except LandingFileError as err:
            found = str(err).split(" is longer")[0].removeprefix("f.csv ")
        assert found == verdict, f"in chunks of {size} bytes"


def test_a_name_holding_a_glob_character_is_refused_for_spark_read_formats_and_read_for_binary_files(
    tmp_path,
):
    """``x[1].csv`` read with multiLine failed inside Spark (an untyped error, retried, the file neither
    read nor quarantined): found by the generated landing folders; now refused with its reason."""
    folder = tmp_path / "csvs"
    folder.mkdir()
    (folder / "x[1].csv").write_text("x\n1\n")
    (folder / "ok.csv").write_text("x\n2\n")
    csvs = list_landing(str(folder))
    assert [os.path.basename(f) for f in csvs.files] == ["ok.csv"]
    assert [(os.path.basename(r.path), r.reason) for r in csvs.refused] == [("x[1].csv", GLOB_NAME)]
    assert sorted(os.path.basename(f) for f in list_landing(str(folder), spark_reads=False).files) == [
        "ok.csv",
        "x[1].csv",
    ]
