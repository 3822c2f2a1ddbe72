"""The former name of :mod:`ensemble.native` (``python -m ensemble --version`` and old imports).

Importing it gives :mod:`ensemble.native` itself (the same module object), so
``ensemble._native.FORCED_PURE`` and ``ensemble.native.FORCED_PURE`` never differ.
"""

import sys

from . import native

sys.modules[__name__] = native
