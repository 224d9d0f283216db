"""Write your own eviction policy (docs/policies.md).

    from dtrforensics.policy import policy

    @policy
    def dtr(compute, size, staleness):
        return compute / (size * staleness)

Integers divide as the reference divides (a denominator that is not positive
scores plus infinity; one correct rounding); `ratio(num, a, b)` says the same
explicitly. Run it wherever a policy name goes: `--policy my_policies.py:dtr`.
The module itself is the decorator too, so `import dtrforensics` then
`@dtrforensics.policy` works.
"""

import sys
import types

from .engine.features import FEATURE_NAMES, FEATURES
from .engine.user_policy import PolicyDefinition, policy, ratio

__all__ = ["FEATURES", "FEATURE_NAMES", "PolicyDefinition", "policy", "ratio"]


class _CallableModule(types.ModuleType):
    """`dtrforensics.policy` is this module, and `@dtrforensics.policy` its decorator."""

    def __call__(self, *args, **kwargs):
        return policy(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
