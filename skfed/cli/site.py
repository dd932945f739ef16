"""``skfed site serve CONFIG``: run a site service; ``skfed site check CONFIG``: list every
problem of its configuration, or what it allows (see ``docs/data-officers.md``);
``skfed relay serve CONFIG``: run a relay for sites that only dial out
(``docs/deployment.md``)."""

import signal
import sys


def add_site_parser(sub):
    site = sub.add_parser("site", help="run this site's service (sites that decide)")
    actions = site.add_subparsers(dest="site_command", required=True)
    serve = actions.add_parser(
        "serve", help="answer skfed's named operations on this site's datasets, under its "
                      "policy, with an audit log (gRPC over mutual TLS)")
    serve.add_argument("config", help="the site's TOML configuration")
    check = actions.add_parser(
        "check", help="read the configuration: list every problem (exit 2), or say what it "
                      "allows")
    check.add_argument("config", help="the site's TOML configuration")


def add_relay_parser(sub):
    relay = sub.add_parser("relay", help="run a relay for sites that only dial out")
    actions = relay.add_subparsers(dest="relay_command", required=True)
    serve = actions.add_parser(
        "serve", help="forward analysts' sealed requests to the sites connected to it, and "
                      "their sealed replies back (gRPC over mutual TLS; it reads none)")
    serve.add_argument("config", help="the relay's TOML configuration")


def run_relay(args):
    from ..sites.relay import RelayServer, load_relay_config

    try:
        server = RelayServer(**load_relay_config(args.config)).start()
    except (ValueError, OSError, ImportError) as exc:
        print(f"skfed relay: error: {exc}", file=sys.stderr)
        return 2
    print(f"skfed relay {server.name!r} on port {server.port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    try:
        server.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


def run_site(args):
    from ..sites.policy import check_config

    # serve and check read the configuration alike: a problem stops the service
    config, problems = check_config(args.config)
    if problems:
        if len(problems) > 1:
            print(f"skfed site: error: {len(problems)} problems in {args.config!r}; the "
                  "service does not start:", file=sys.stderr)
        for problem in problems:
            print(f"skfed site: error: {problem}", file=sys.stderr)
        return 2
    if args.site_command == "check":
        print(describe_config(config))
        return 0
    from ..sites.dialout import DialOutSite
    from ..sites.transport import SiteServer

    try:
        server = (DialOutSite if config.relay else SiteServer)(config).start()
    except (ValueError, OSError, ImportError) as exc:
        print(f"skfed site: error: {exc}", file=sys.stderr)
        return 2
    # the line a supervisor (or a test) waits for: the port actually bound
    where = (f"through relay {config.relay} (no listening socket)" if config.relay
             else f"on port {server.port}")
    print(f"skfed site {config.name!r} serving {sorted(config.datasets)} {where}; audit log "
          f"{config.audit}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    try:
        server.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


def describe_config(config):
    """What a site's configuration allows, in words (``skfed site check``)."""
    p = config.policy
    lines = [f"site {config.name!r} dials out to relay {config.relay} and listens on nothing"
             if config.relay else f"site {config.name!r} listens on {config.listen}",
             "datasets: " + ", ".join(_dataset(d) for d in config.datasets.values()),
             "analysts: " + _listed(p.analysts, "any analyst certificate of the federation's "
                                                "CA"),
             "operations: " + _listed(p.operations, "every declared operation"),
             "solvers: " + _listed(p.solvers, "all of skfed's"),
             "losses: " + _listed(p.losses, "all of skfed's"),
             f"min_rows = {p.min_rows}, min_level_count = {p.min_level_count}, "
             f"max_parameters_per_row = {p.max_parameters_per_row}",
             f"dominance = {p.dominance:g} (the largest min_rows - 1 rows may hold at most "
             "this share of a sum released in the clear)",
             "finer sums in the clear: " + _listed(p.finer_sums, "none"),
             f"formulas: {p.formulas}",
             f"work: max_local_iterations = {p.max_local_iterations}, max_request_seconds = "
             f"{p.max_request_seconds:g}",
             f"kept between requests: the rows of kept_datasets = {p.kept_datasets} dataset "
             f"references (all analysts), fit states of fit_state_mb = {p.fit_state_mb:g} MB "
             f"a fit and analyst_state_mb = {p.analyst_state_mb:g} MB an analyst",
             "require: " + (", ".join(p.require) or "nothing"),
             "consortium: " + _listed(p.consortium, "any verified sites"),
             *(f"analyst {a}: datasets {_listed(r.get('datasets'), 'all')}; operations "
               f"{_listed(r.get('operations'), 'all served')}" for a, r in p.access.items()),
             f"privacy: epsilon_budget = {p.epsilon_budget} per dataset, max_delta = "
             f"{p.max_delta}, min_noise_multiplier = {p.min_noise_multiplier}; ledger "
             f"{config.ledger}",
             f"audit log: {config.audit}; officer log: {config.officer_log}"]
    return "\n".join(lines)


def _dataset(conf):
    """A declared dataset in words: its columns, weights, domains and population."""
    parts = [_listed(conf.columns, "all columns")]
    if conf.weights:
        parts.append("weights " + ", ".join(conf.weights))
    if conf.domains:
        parts.append("domains " + ", ".join(f"{c} [{lo:g}, {hi:g}]"
                                            for c, (lo, hi) in conf.domains.items()))
    if conf.population != "all":
        parts.append(f"population {conf.population}")
    if conf.consortium:
        parts.append("consortium " + ", ".join(conf.consortium))
    return f"{conf.name} ({'; '.join(parts)})"


def _listed(values, everything):
    """A policy list in words: ``None`` allows everything, an empty list nothing."""
    if values is None:
        return everything
    return ", ".join(values) if values else "none"
