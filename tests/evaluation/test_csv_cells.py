"""The tables' CSV files: a text cell a spreadsheet would run as a formula is kept as text."""

import csv

from maopd.evaluation.report import build_tables, spreadsheet_safe, write_tables
from maopd.evaluation.summary import summarize
from tests.evaluation.test_eval_metrics import make_records

FORMULA = '=HYPERLINK("http://127.0.0.1/x","click")'


def test_a_method_named_like_a_formula_is_written_as_text(tmp_path):
    table = {"d": [[1, 0], [1, 1]]}
    records = make_records(FORMULA, table) + make_records("plain", table)
    write_tables(build_tables(summarize(records, [(FORMULA, "plain")], draws=10)), tmp_path)
    cells = [cell for path in tmp_path.glob("*.csv") for row in csv.reader(path.open()) for cell in row]
    assert cells and "'" + FORMULA in cells and FORMULA not in cells
    assert not [cell for cell in cells if cell[:1] in ("=", "+", "@")]


def test_only_text_that_starts_like_a_formula_is_quoted():
    assert [spreadsheet_safe(c) for c in ("=1+1", "+cmd", "-2+3", "@SUM(A1)", "plain", "a=b")] == [
        "'=1+1",
        "'+cmd",
        "'-2+3",
        "'@SUM(A1)",
        "plain",
        "a=b",
    ]
    assert spreadsheet_safe(-0.25) == -0.25 and spreadsheet_safe(3) == 3
