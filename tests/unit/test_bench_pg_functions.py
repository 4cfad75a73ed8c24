"""bench.pg_functions reads callgrind_annotate's inclusive lines, summed by function."""

from __future__ import annotations

from bench.pg_functions import parse_inclusive

ANNOTATED = """\
--------------------------------------------------------------------------------
Ir                file:function
--------------------------------------------------------------------------------
6,171,700 (100.0%)  PROGRAM TOTALS
1,633,000 (26.46%)  execMain.c:ExecutorStart [postgres]
  562,900 ( 9.12%)  ri_triggers.c:RI_FKey_check_ins [postgres]
  321,000 ( 5.20%)  jsonb.c:jsonb_in
1,000,000 (16.20%)  ???:0x000000000030aa20 [postgres]
      100 ( 0.00%)  execMain.c:ExecutorStart'2 [postgres]
   10,000 ( 0.16%)  ./src/other.c:jsonb_in [postgres]
"""


def test_each_function_is_summed_over_its_files_and_addresses_and_totals_are_left_out() -> None:
    found = parse_inclusive(ANNOTATED)

    assert found["ExecutorStart"] == 1_633_000
    assert found["ExecutorStart'2"] == 100  # a recursive cycle is its own entry
    assert found["RI_FKey_check_ins"] == 562_900
    assert found["jsonb_in"] == 331_000
    assert not [name for name in found if name.startswith("0x") or "TOTALS" in name]
