# SPDX-License-Identifier: Apache-2.0
"""The binding finds torch's pip-installed NVRTC (the C library cannot know Python's
site-packages): a fake wheel layout on sys.path is found, and FUSEGEN_NVRTC is left alone
when the user set it. No library is loaded.

Run:  python3 -m pytest python/tests -q      or      python3 -m unittest discover -s python/tests
"""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))

from fusegen import _core  # noqa: E402


class PipNvrtc(unittest.TestCase):
    def test_wheel_layouts_found(self):
        for sub, name in (("nvidia/cuda_nvrtc/lib", "libnvrtc.so.12"), ("nvidia/cu13/lib", "libnvrtc.so.13")):
            with tempfile.TemporaryDirectory() as site:
                os.makedirs(os.path.join(site, sub))
                lib = os.path.join(site, sub, name)
                open(lib, "wb").close()
                sys.path.insert(0, site)
                try:
                    self.assertEqual(_core._pip_nvrtc(), lib)
                finally:
                    sys.path.remove(site)

    def test_user_choice_kept(self):
        old = os.environ.get("FUSEGEN_NVRTC")
        os.environ["FUSEGEN_NVRTC"] = "/opt/mine/libnvrtc.so"
        try:
            _core._find_nvrtc_for_torch_users()
            self.assertEqual(os.environ["FUSEGEN_NVRTC"], "/opt/mine/libnvrtc.so")
        finally:
            if old is None:
                del os.environ["FUSEGEN_NVRTC"]
            else:
                os.environ["FUSEGEN_NVRTC"] = old


if __name__ == "__main__":
    unittest.main()
