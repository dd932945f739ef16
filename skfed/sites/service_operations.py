"""The site service's own operations: closing a fit session, and sessions of masked sums.

They run no site function of an estimator (a fit's step is declared beside
:func:`~skfed.executors.base.client_round`); they carry the service's session
machinery, declared here in the same registry
(:func:`skfed.federation.operations.service_operation`), so that a policy and the
gate see them as any other operation.
"""

from ..federation.operations import COUNTS, MASKED, NOTHING, Arg, service_operation

service_operation(
    "fit.close", releases=NOTHING, target="fit",
    describes="nothing (the session's objective and states are dropped)")
service_operation(
    "sums.open", releases=COUNTS,
    describes="the site's public key for a session of masked sums, signed with its "
              "certificate, and the weight sum of the dataset's rows (their count; where "
              "they carry a weight column, only where the site requires no protection)",
    arguments=(Arg("key_session", "bytes", most=64), Arg("party", "int", low=0, high=1 << 16)))
service_operation(
    "sums.key_list", releases=NOTHING, target="sums",
    describes="nothing (the site checks every peer's signed key, and that the peers are "
              "the dataset's consortium)",
    arguments=(Arg("keys", "value", check=lambda v: None if isinstance(v, dict) and
                   len(v) <= 10_000 else "keys are {party: key}"),
               Arg("proofs", "value", check=lambda v: None if isinstance(v, dict) and
                   len(v) <= 10_000 else "proofs are {party: proof}")))
service_operation(
    "sums.masked", releases=MASKED, target="sums",
    describes="one masked vector: the reply of a maskable operation on the session's rows, "
              "in exact integer limbs; only the sum over every site of the consortium can "
              "be decoded",
    arguments=(Arg("operation", "str", most=64),
               Arg("args", "value", check=lambda v: None if isinstance(v, dict) else
                   "the inner arguments are named"),
               Arg("exchange", "int", low=1, high=2 ** 62), Arg("parties", "value", check=(
                   lambda v: None if isinstance(v, (list, tuple)) and len(v) <= 10_000
                   else "parties are a list")),
               Arg("coefficient", "float", low=0)))
service_operation(
    "sums.close", releases=NOTHING, target="sums",
    describes="nothing (the session's keys are dropped)")
