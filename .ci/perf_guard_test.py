#!/usr/bin/env python3
"""Tests of the performance guard's arithmetic and verdicts (no valgrind run)."""

import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import perf_guard  # noqa: E402

BASE = {"w1_instructions_per_step": 74000, "w2_alloc_bytes_per_agent": 200000}


class Compare(unittest.TestCase):
    def test_within_five_percent_passes_and_prints_both_figures(self):
        lines, ok = perf_guard.compare(BASE, {"w1_instructions_per_step": 77700, "w2_alloc_bytes_per_agent": 190000})
        self.assertTrue(ok)
        w1 = next(l for l in lines if l.startswith("W1"))
        self.assertIn("74,000", w1)
        self.assertIn("77,700", w1)
        self.assertIn("+5.0%", w1)

    def test_past_five_percent_fails_naming_the_figure(self):
        lines, ok = perf_guard.compare(BASE, {"w1_instructions_per_step": 77800, "w2_alloc_bytes_per_agent": 200000})
        self.assertFalse(ok)
        failed = [l for l in lines if "FAIL" in l]
        self.assertEqual(len(failed), 1)
        self.assertTrue(failed[0].startswith("W1 instructions per step"))
        self.assertIn("74,000", failed[0])
        self.assertIn("77,800", failed[0])

    def test_a_missing_figure_fails(self):
        _, ok = perf_guard.compare(BASE, {"w1_instructions_per_step": 74000})
        self.assertFalse(ok)

    def test_a_gain_passes_and_asks_for_the_baseline_to_follow(self):
        lines, ok = perf_guard.compare(BASE, {"w1_instructions_per_step": 60000, "w2_alloc_bytes_per_agent": 200000})
        self.assertTrue(ok)
        self.assertIn("update the baseline", next(l for l in lines if l.startswith("W1")))

    def test_a_figure_without_baseline_is_shown_not_compared(self):
        measured = dict(BASE, w2_instructions_per_start=90000)
        lines, ok = perf_guard.compare(BASE, measured)
        self.assertTrue(ok)
        self.assertIn("new, not compared", lines[-1])


class Arithmetic(unittest.TestCase):
    def test_the_fixed_costs_cancel(self):
        # 5,000 fixed + 70 per unit, counted at 1,000 and 3,000 units.
        self.assertEqual(perf_guard.per_unit(5000 + 70 * 1000, 5000 + 70 * 3000, 1000, 3000), 70)

    def test_counts_must_grow(self):
        with self.assertRaises(perf_guard.GuardError):
            perf_guard.per_unit(1, 2, 100, 100)

    def test_callgrinds_summary_line_is_read(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "cg.out"
            out.write_text("version: 1\ncmd: x\nevents: Ir\nsummary: 123456\ntotals: 123456\n")
            self.assertEqual(perf_guard.summary(out), 123456)

    def test_a_failed_bench_run_is_an_error_not_a_figure(self):
        line = json.dumps({"workload": "w2", "ok": False, "notes": "[CHECK FAILED] x", "metrics": {}})
        with self.assertRaises(perf_guard.GuardError):
            perf_guard.bench_line(line + "\n")

    def test_the_checked_in_baseline_names_every_figure(self):
        baseline = json.loads(perf_guard.BASELINE.read_text())
        self.assertEqual(set(baseline), set(perf_guard.FIGURES))


if __name__ == "__main__":
    unittest.main()
