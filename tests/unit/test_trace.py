"""Tests for loading job profiles from a trace CSV."""

from __future__ import annotations

from pathlib import Path

import pytest

from xover.errors import XoverError
from xover.plan import JobProfile, TraceError, load_trace_csv

HEADER = "name,devices,compute_ms,comm_ms,memory_gb"


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_required_and_optional_columns(tmp_path):
    path = write(
        tmp_path,
        "name,devices,compute_ms,comm_ms,memory_gb,data_ms,iterations,interference,startup_ms\n"
        "resnet,2,130,40,0.2,1.5,300,0.35,5000\n"
        "vgg, 4 , 60.5 ,150,10,,,,\n",
    )
    assert load_trace_csv(path) == [
        JobProfile("resnet", 2, 130.0, 40.0, 0.2, data_ms=1.5, iterations=300, interference=0.35, startup_ms=5000),
        JobProfile("vgg", 4, 60.5, 150.0, 10.0, data_ms=0.0, iterations=100),
    ]


def test_reads_the_link_share_its_interference_was_measured_next_to(tmp_path):
    path = write(tmp_path, "name,devices,compute_ms,comm_ms,memory_gb,interference,interference_link_share\n"
                           "a,1,100,10,1,0.3,0.62\nb,1,100,10,1,0.3,\n")
    a, b = load_trace_csv(path)
    assert (a.interference_link_share, b.interference_link_share) == (0.62, None)


def test_columns_in_any_order_with_byte_order_mark_and_blank_lines(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_bytes("\ufeffmemory_gb,name,comm_ms,devices,compute_ms\r\n\r\n3,a,10,1,100\r\n".encode())
    assert load_trace_csv(str(path)) == [JobProfile("a", 1, 100.0, 10.0, 3.0)]


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("", 1, "empty file"),
        (HEADER + "\n", 2, "no jobs"),
        ("name,devices,compute_ms,memory_gb\na,1,10,1\n", 1, "missing column comm_ms"),
        (HEADER + ",gpu\na,1,10,10,1,x\n", 1, "unknown column 'gpu'"),
        (HEADER + ",name\n", 1, "appears twice"),
        (HEADER + "\na,1,10,10,1\nb,1,fast,10,1\n", 3, "compute_ms must be a number, got 'fast'"),
        (HEADER + "\na,1,10,nan,1\n", 2, "comm_ms must be a number"),
        (HEADER + "\na,0,10,10,1\n", 2, "devices must be >= 1, got 0"),
        (HEADER + "\na,-2,10,10,1\n", 2, "devices must be >= 1, got -2"),
        (HEADER + "\na,1.5,10,10,1\n", 2, "devices must be a whole number"),
        (HEADER + "\na,1,-10,10,1\n", 2, "compute_ms must be >= 0"),
        (HEADER + "\na,1,0,10,1\n", 2, "compute_ms must be at least 0.001 (a microsecond), got 0.0"),
        (HEADER + "\na,1,1e-9,10,1\n", 2, "compute_ms must be at least 0.001 (a microsecond), got 1e-09"),
        (HEADER + "\na,1,10,-1,1\n", 2, "comm_ms must be >= 0"),
        (HEADER + "\na,1,10,10,-1\n", 2, "memory_gb must be >= 0"),
        (HEADER + ",data_ms\na,1,10,10,1,-3\n", 2, "data_ms must be >= 0"),
        (HEADER + ",interference\na,1,10,10,1,-0.6\n", 2, "interference must be >= -0.5"),
        (HEADER + ",interference_link_share\na,1,10,10,1,0\n", 2, "interference_link_share is a share of the partner's "
         "iteration, a number > 0 and <= 1, got 0.0"),
        (HEADER + ",interference_link_share\na,1,10,10,1,1.5\n", 2, "a number > 0 and <= 1, got 1.5"),
        (HEADER + ",iterations\na,1,10,10,1,0\n", 2, "iterations must be a whole number >= 1"),
        (HEADER + ",iterations\na,1,10,10,1,ten\n", 2, "iterations must be a whole number"),
        # 1e12 was "must be a whole number": a whole number as a spreadsheet writes it is read, and its size told
        (HEADER + ",iterations\na,1,10,10,1,1e12\n", 2, "iterations 1e12 is out of range: at most 1e+09"),
        (HEADER + ",iterations\na,1,10,10,1,2.5e0\n", 2, "iterations must be a whole number, got '2.5e0'"),
        (HEADER + "\na,1,10,10,1\n\nb,1,10,10,1\na,2,20,20,2\n", 5, "duplicate name 'a' (first on line 2)"),
        (HEADER + "\na,1,10,10\n", 2, "4 fields, the header has 5"),
        (HEADER + "\na\n", 2, "1 field, the header has 5"),
        (HEADER + "\na,1,10,10,1,7\n", 2, "6 fields, the header has 5"),
        (HEADER + "\n ,1,10,10,1\n", 2, "empty name"),
        # a row is told by its first line: a quoted name of two lines was told by its last
        (HEADER + '\n"a\nb",1,10,10,1\n', 2, "name must be ASCII letters"),
    ],
)
def test_errors_name_the_file_the_line_and_the_problem(tmp_path, text, line, problem):
    path = write(tmp_path, text, name="cluster-b.csv")
    with pytest.raises(TraceError) as raised:
        load_trace_csv(path)
    message = str(raised.value)
    assert "cluster-b.csv" in message
    assert f"line {line}:" in message
    assert problem in message
    assert isinstance(raised.value, XoverError)


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(TraceError, match="missing.csv: cannot read the profiles file"):
        load_trace_csv(tmp_path / "missing.csv")


def test_binary_file_is_a_user_error(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(TraceError, match="trace.csv: not a UTF-8"):
        load_trace_csv(path)


@pytest.mark.parametrize("text", [
    "name;devices;compute_ms;comm_ms;memory_gb\na;1;100;10;3\n",
    "name\tdevices\tcompute_ms\tcomm_ms\tmemory_gb\na\t1\t100\t10\t3\n",
    "Name,Devices,Compute_ms,Comm_MS,Memory_GB\r\na,1,100,10,3\r\n",
])
def test_a_spreadsheets_export_is_read_as_the_simulators_traces_are(tmp_path, text):
    # `;` or tabs between fields and capitalised names: refused here ("unknown column 'name;devices;...'"), and
    # read by `xover simulate` from the trace beside it
    assert load_trace_csv(write(tmp_path, text)) == [JobProfile("a", 1, 100.0, 10.0, 3.0)]


def test_a_spreadsheets_empty_trailing_columns_are_read_past_and_a_decimal_comma_is_told(tmp_path):
    text = "name;devices;compute_ms;comm_ms;memory_gb;;\na;1;100;10;3;;\n"
    assert load_trace_csv(write(tmp_path, text)) == [JobProfile("a", 1, 100.0, 10.0, 3.0)]
    with pytest.raises(TraceError, match=r"got '121,5': write it without thousands separators, with '\.' for"):
        load_trace_csv(write(tmp_path, "name;devices;compute_ms;comm_ms;memory_gb\na;1;121,5;10;3\n"))


def test_a_whole_number_written_with_an_exponent_is_read_as_one(tmp_path):
    (job,) = load_trace_csv(write(tmp_path, HEADER + ",iterations\na,2e0,10,10,1,2e3\n"))
    assert (job.devices, job.iterations) == (2, 2000)
    assert isinstance(job.iterations, int)
