"""Privacy building blocks: secure aggregation and client-level differential privacy.

``privacy=SecureAggregation()`` or ``privacy=DifferentialPrivacy(epsilon=...)`` on
any estimator runs its rounds through these blocks
(:mod:`skfed.privacy.secure_rounds`, :mod:`skfed.privacy.dp_rounds`).

Needs the ``privacy`` extra (``cryptography`` for secure aggregation,
``dp-accounting`` for the accountant); each is imported only when used.

- :mod:`skfed.privacy.secure_aggregation`: pairwise-mask secure aggregation
  (X25519 + HKDF + AES-128-CTR from ``cryptography``) in fixed point modulo
  ``2**64``; the server learns only the (weighted) sum.
- :mod:`skfed.privacy.accounting`: L2 clipping, (distributed) Gaussian noise,
  and its epsilon by ``dp_accounting``'s RDP accountant.
"""

from .accounting import (GaussianAccountant, calibrate_noise_multiplier, clip_by_l2_norm,
                         distributed_noise_share, distributed_noise_std)
from .secure_aggregation import (DropoutError, FixedPoint, MaskedMessage,
                                 SecureAggregationParty, aggregate_masked)
from .secure_rounds import SecureAggregation
from .dp_rounds import DifferentialPrivacy, PrivacyBudgetWarning, PrivacyNoiseWarning

__all__ = ["SecureAggregation", "DifferentialPrivacy", "PrivacyBudgetWarning",
           "PrivacyNoiseWarning",
           "FixedPoint", "SecureAggregationParty", "MaskedMessage", "aggregate_masked",
           "DropoutError", "GaussianAccountant", "calibrate_noise_multiplier",
           "clip_by_l2_norm", "distributed_noise_std", "distributed_noise_share"]
