"""scanpy.external's functions that scurry implements: ``scurry.external.pp.harmony_integrate``
(scanpy.external.pp.harmony_integrate's signature), the same function as
``scurry.pp.harmony_integrate``. ``import scurry.external as sce`` as with scanpy."""
from __future__ import annotations

import sys
import types

from . import pp as _pp

__all__ = ["pp"]

pp = types.ModuleType(__name__ + ".pp", "scanpy.external.pp's functions in scurry: harmony_integrate")
pp.harmony_integrate = _pp.harmony_integrate
pp.__all__ = ["harmony_integrate"]
sys.modules[pp.__name__] = pp
