"""Write your own eviction policy (docs/policies.md).

    from dtrforensics.policy import policy, ratio

    @policy
    def dtr(compute, size, staleness):
        return ratio(compute, size, staleness)

Run it wherever a policy name goes: `--policy my_policies.py:dtr`.
"""

from .engine.features import FEATURES, FEATURE_NAMES
from .engine.user_policy import PolicyDefinition, policy, ratio

__all__ = ["FEATURES", "FEATURE_NAMES", "PolicyDefinition", "policy", "ratio"]
