"""``skfed fit --model finegray --target EVENT TIME --cause K``: the Fine-Gray model of
one cause's subdistribution hazard (:class:`skfed.survival.FedFineGray`) from the
command line.

The rows: one CSV with a ``--clients`` column, one CSV per site (``--site-files``),
or a dataset that site services serve (``--site-service NAME=HOST:PORT ...
--dataset NAME``). The covariates: every other column but ``--drop``'s (numeric).
The fit is the Python API's on the same rows (R's ``finegray`` + weighted ``coxph`` on
the pooled rows); a site that keeps its event times (its default policy) refuses it,
and the error says why.
"""

import json

from .fit import CLIError, fit_watching_convergence, pass_on_warnings
from .json_values import json_value

#: options ``--model finegray`` does not take, with what to do instead
_NOT_FOR_FINEGRAY = (
    ("formula", "--formula", "name the columns with --target EVENT TIME and --drop"),
    ("categorical", "--categorical", "give the covariates as numeric (0/1) columns"),
    ("alpha", "--alpha", "the Fine-Gray model is unpenalized (R's coxph)"),
    ("C", "--C", "the Fine-Gray model is unpenalized"),
    ("l1_ratio", "--l1-ratio", "the Fine-Gray model is unpenalized"),
    ("impute", "--impute", "it fits the rows as they are"),
    ("offset", "--offset", "it has no offset"),
    ("strata", "--strata", "it has one baseline subdistribution hazard"),
    ("ties", "--ties", "it uses Efron's ties, as R's coxph"),
    ("time_grid", "--time-grid", "its censoring weights need the exact times"),
    ("dp_epsilon", "--dp-epsilon", "differential privacy does not cover its Newton steps; "
                                   "--secure-aggregation masks each site's sums"),
    ("report", "--report", "it has no HTML report yet: use --json"),
    ("output", "--output", "use --json for its numbers"),
    ("scheduler", "--scheduler", "read local CSV files or site services (--site-service)"),
)


def add_finegray_options(fit):
    """``--cause``: the event code whose subdistribution hazard is modelled."""
    group = fit.add_argument_group(
        "competing risks (--model finegray)", "the Fine-Gray model of one cause "
        "(docs/survival.md): --target EVENT TIME, the event coded 0 (censored), "
        "1, 2, ... (the causes)")
    group.add_argument("--cause", type=int, metavar="K",
                       help="the cause whose subdistribution hazard is modelled")


def is_finegray(args):
    """Whether ``skfed fit`` fits a Fine-Gray model; ``--cause`` with another model is
    refused, not ignored."""
    finegray = getattr(args, "model", None) == "finegray"
    if getattr(args, "cause", None) is not None and not finegray:
        raise CLIError("--cause is for --model finegray.")
    return finegray


def _check_options(args):
    for attribute, option, instead in _NOT_FOR_FINEGRAY:
        if getattr(args, attribute, None) not in (None, False, [], ()):
            raise CLIError(f"{option} does not go with --model finegray: {instead}.")
    if getattr(args, "site", None):
        raise CLIError("--site does not go with --model finegray: read local CSV files or "
                       "site services (--site-service).")
    if not args.target or len(args.target) != 2:
        raise CLIError("--model finegray needs --target EVENT TIME: the event code (0 "
                       "censored, 1, 2, ... the causes), then the follow-up time.")
    if args.cause is None:
        raise CLIError("--model finegray needs --cause K: the event code of the cause whose "
                       "subdistribution hazard is modelled.")
    if args.test_size not in (None, 0):
        raise CLIError("--test-size does not go with --model finegray: it is fitted on "
                       "every row (no held-out score).")
    if args.cov_type not in (None, "robust"):
        raise CLIError("--model finegray reports R's robust standard errors (and the "
                       "model-based ones beside them); --cov-type takes robust only.")


def _data(args):
    """``(data, clients)``: the local rows, or the site services' dataset."""
    from .formula_fit import _local_frame, _service_dataset

    if args.site_service:
        return _service_dataset(args), None
    return _local_frame(args)


def _covariates(args, data, clients):
    """Every column but the event, the time, the site column and ``--drop``'s."""
    skip = set(args.target) | set(args.drop) | ({clients} if isinstance(clients, str)
                                                else set())
    unknown = [c for c in args.drop if c not in data.columns]
    if unknown:
        raise CLIError(f"--drop names columns the data do not have: {unknown}.")
    return [str(c) for c in data.columns if c not in skip]


def fit_finegray(args):
    """The fitted :class:`~skfed.survival.FedFineGray` and whether it converged."""
    from ..data import FederatedDataset
    from ..privacy import SecureAggregation
    from ..sites import SiteRefusal, SiteServiceError, SiteUnavailable
    from ..survival import FedFineGray

    event, time = args.target
    options = {"privacy": SecureAggregation() if args.secure_aggregation else None}
    for name, value in (("tol", args.tol), ("max_rounds", args.max_rounds)):
        if value is not None:  # else the Python API's defaults
            options[name] = value
    data = None
    try:
        data, clients = _data(args)
        covariates = _covariates(args, data, clients)
        model = FedFineGray(**options)
        fitted, caught = fit_watching_convergence(lambda: model.fit(
            data, duration_col=time, event_col=event, event_of_interest=args.cause,
            covariates=covariates, clients=clients))
    except (ValueError, TypeError, SiteRefusal, SiteServiceError, SiteUnavailable) as exc:
        raise CLIError(str(exc)) from exc
    finally:
        if isinstance(data, FederatedDataset):  # the connections to the services
            data.close()
    return fitted, pass_on_warnings(caught, stacklevel=2)


def format_finegray_text(model, converged, args):
    """The terminal report: the setting, the table (hazard ratios), the rounds."""
    event, time = args.target
    masked = " (secure aggregation: only the sites' sums decoded)" \
        if args.secure_aggregation else ""
    lines = [f"skfed fit: FedFineGray (finegray, cause {model.event_of_interest_} of "
             f"{event}, time {time}), Newton's method on the sites' summed weighted risk-set "
             f"sums, {model.n_clients_} sites{masked}",
             f"censoring weights: the Kaplan-Meier curve of censoring of the pooled rows "
             f"({len(model.censoring_times_)} censoring times; R's finegray); "
             f"{len(model.event_times_)} event times of cause {model.event_of_interest_}",
             "", str(model.summary(exponentiate=True)).rstrip("\n"), "",
             "standard errors: robust (R's coxph of the weighted rows, its se); model-based: "
             + ", ".join(f"{n} {s:.6g}" for n, s in zip(model.param_names_,
                                                         model.cov_params_naive_.diagonal()
                                                         ** 0.5)),
             f"log partial likelihood: {model.loglike_null_:.6f} at 0, {model.loglike_:.6f} "
             "at the fit",
             f"{model.n_iter_} Newton round{'' if model.n_iter_ == 1 else 's'}, "
             + ("converged" if converged else "did NOT converge (raise --max-rounds)")]
    return "\n".join(lines) + "\n"


def finegray_json(model, converged):
    """Every number of the fit as plain JSON values (``--json``)."""
    table = model.summary_frame(exponentiate=True)
    return json_value({
        "model": "finegray", "estimator": "FedFineGray",
        "cause": model.event_of_interest_, "covariates": list(model.param_names_),
        "coef": dict(zip(model.param_names_, model.coef_)),
        "se_robust": dict(zip(model.param_names_, model.bse_)),
        "se_model_based": dict(zip(model.param_names_,
                                   model.cov_params_naive_.diagonal() ** 0.5)),
        "summary": {str(k): dict(v) for k, v in table.to_dict(orient="index").items()},
        "loglike": model.loglike_, "loglike_null": model.loglike_null_,
        "event_times": model.event_times_, "censoring_times": model.censoring_times_,
        "censoring_curve": model.censoring_curve_, "sites": model.n_clients_,
        "rounds": model.n_iter_, "converged": converged})


def run_finegray_fit(args, out):
    """``skfed fit --model finegray``: fit, print the report, write ``--json``; returns
    the fitted :class:`~skfed.survival.FedFineGray`."""
    _check_options(args)
    model, converged = fit_finegray(args)
    print(format_finegray_text(model, converged, args), end="", file=out)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(finegray_json(model, converged), fh, indent=1)
        print(f"JSON written to {args.json}", file=out)
    return model
