#!/usr/bin/env python3
"""bench/scaling_model_test.py: the scaling model's arithmetic (bench/
scaling_model.py) on inputs built here: one all-reduce after the backward
pass costs bytes x 2 (N - 1) / N / W; buckets hide what the rest of the
backward pass covers; gradient bytes come from a safetensors header; layer
times from a store's kernels rows, or spread by backward FLOPs."""
import json
import os
import sqlite3
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scaling_model as m  # noqa: E402

MIB = 1024 * 1024


class ExposedTime(unittest.TestCase):
    def test_after_backward_is_the_whole_ring(self):
        layers = [("fc", 10.0), ("conv", 30.0)]
        grads = {"fc": 40 * MIB, "conv": 60 * MIB}
        # 100 MiB at 1 GB/s bus, 4 ranks: x 2 x 3/4.
        expected = 100 * MIB * 1.5 / 1e9 * 1e3
        self.assertAlmostEqual(m.exposed_ms(layers, grads, 4, 1.0, 0), expected, places=9)
        self.assertEqual(m.exposed_ms(layers, grads, 1, 1.0, 0), 0.0)  # one rank sends nothing

    def test_buckets_hide_behind_the_rest_of_the_backward_pass(self):
        # fc's 30 MiB fill a 25 MiB bucket at t = 10 ms; at 1 GB/s and 2 ranks
        # it takes 31.5 ms, ending at 41.5 ms; conv's 20 MiB go at the end
        # (t = 50 ms) and take 21.0 ms: 21.0 ms exposed.
        layers = [("fc", 10.0), ("conv", 40.0)]
        grads = {"fc": 30 * MIB, "conv": 20 * MIB}
        per_mib = MIB / 1e9 * 1e3
        self.assertAlmostEqual(m.exposed_ms(layers, grads, 2, 1.0, 25), 20 * per_mib, places=9)
        # A slow link: the first bucket is still running when the backward ends.
        slow = m.exposed_ms(layers, grads, 2, 0.5, 25)
        self.assertAlmostEqual(slow, (10 + 2 * 30 * per_mib + 2 * 20 * per_mib) - 50, places=9)


class Inputs(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def test_gradient_bytes_from_a_checkpoint_header(self):
        header = {
            "__metadata__": {"format": "pt"},
            "conv1.weight": {"dtype": "F32", "shape": [64, 3, 7, 7], "data_offsets": [0, 37632]},
            "bn1.weight": {"dtype": "F32", "shape": [64], "data_offsets": [37632, 37888]},
            "bn1.bias": {"dtype": "F32", "shape": [64], "data_offsets": [37888, 38144]},
            "bn1.running_mean": {"dtype": "F32", "shape": [64], "data_offsets": [38144, 38400]},
            "bn1.num_batches_tracked": {"dtype": "I64", "shape": [], "data_offsets": [38400, 38408]},
        }
        text = json.dumps(header).encode()
        path = os.path.join(self.dir.name, "c.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + bytes(38408))
        self.assertEqual(m.checkpoint_layer_bytes(path), {"conv1": 37632, "bn1": 512})

    def test_layer_times_from_the_store_or_by_flops(self):
        path = os.path.join(self.dir.name, "s.db")
        con = sqlite3.connect(path)
        con.executescript(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, uuid TEXT, step_ms_median REAL);"
            "CREATE TABLE layer_costs (run, layer, pass, flops, bytes);"
            "CREATE TABLE kernels (run, name, phase, calls, total_ms, min_ms, max_ms);"
            "INSERT INTO runs VALUES (1, 'abcd-1', 100.0);"
            "INSERT INTO layer_costs VALUES (1, 'conv1', 'forward', 1, 0),"
            " (1, 'conv1', 'backward_weights', 3, 0), (1, 'fc', 'forward', 1, 0),"
            " (1, 'fc', 'backward', 1, 0);"
            "INSERT INTO kernels VALUES (1, 'conv1', 'backward', 10, 50.0, 0, 0),"
            " (1, 'fc', 'backward', 10, 20.0, 0, 0), (1, 'fc', 'forward', 10, 99.0, 0, 0);")
        con.commit()
        con.close()
        layers, step = m.run_layers(path, "1")
        self.assertEqual(layers, [("fc", 2.0), ("conv1", 5.0)])  # backward order, per call
        self.assertEqual(step, 100.0)
        spread, _ = m.run_layers(path, "abcd", backward_ms=8.0)
        self.assertEqual(spread, [("fc", 2.0), ("conv1", 6.0)])  # 1 : 3 by backward FLOPs


if __name__ == "__main__":
    unittest.main()
