# SPDX-License-Identifier: Apache-2.0
"""Closing or rebinding a layer while another thread runs it (the hardening issue: this freed
the parameters under the run, which then read freed memory or returned wrong values). The C
library now makes fg_layer_destroy wait for the calls in flight and refuse new ones, and a
bind wait for the runs in flight, so every run here returns one binding's exact output or
raises an error that says the layer is closed. Runs on the CPU reference (no GPU needed).

Run:  python3 -m pytest python/tests -q      or      python3 -m unittest discover -s python/tests
"""

import os
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))  # the package from this checkout

import numpy as np  # noqa: E402

import fusegen  # noqa: E402

SPEC = """return layer "busy" {
  input = { "N", 8, 24, 24 },
  conv2d { name = "conv", out_channels = 16, kernel = 3, bias = false },
}
"""


class CloseAndBindDuringRuns(unittest.TestCase):
    def setUp(self):
        self.ctx = fusegen.Context(device=-1)
        rng = np.random.default_rng(12)
        self.x = rng.random((2, 8, 24, 24), dtype=np.float32)
        self.wa = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
        self.wb = -self.wa
        layer = fusegen.Layer(SPEC, self.ctx, name="busy.lua")
        layer.bind("conv.weight", self.wa)
        self.ya = layer(self.x)
        layer.bind("conv.weight", self.wb)
        self.yb = layer(self.x)
        layer.close()

    def tearDown(self):
        self.ctx.close()

    def _runs(self, layer, count, results):
        for _ in range(count):
            try:
                results.append(layer(self.x))
            except (fusegen.Error, ValueError) as e:  # closed: before the call, or refused by the C side
                results.append(e)

    def test_bind_during_runs(self):
        layer = fusegen.Layer(SPEC, self.ctx, name="busy.lua")
        layer.bind("conv.weight", self.wa)
        results = []
        t = threading.Thread(target=self._runs, args=(layer, 10, results))
        t.start()
        for i in range(20):
            layer.bind("conv.weight", self.wb if i % 2 == 0 else self.wa)
        t.join()
        self.assertEqual(len(results), 10)
        for y in results:
            self.assertIsInstance(y, np.ndarray)
            self.assertTrue(np.array_equal(y, self.ya) or np.array_equal(y, self.yb))
        layer.close()

    def test_close_during_runs(self):
        for _ in range(5):
            layer = fusegen.Layer(SPEC, self.ctx, name="busy.lua")
            layer.bind("conv.weight", self.wa)
            results = []
            t = threading.Thread(target=self._runs, args=(layer, 3, results))
            t.start()
            layer.close()
            t.join()
            for y in results:
                if isinstance(y, Exception):
                    self.assertTrue("closed" in str(y) or "not a live layer" in str(y), str(y))
                else:
                    self.assertTrue(np.array_equal(y, self.ya))


if __name__ == "__main__":
    unittest.main()
