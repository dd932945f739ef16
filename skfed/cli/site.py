"""``skfed site serve CONFIG``: run a site service (see ``docs/data-officers.md``)."""

import signal
import sys


def add_site_parser(sub):
    site = sub.add_parser("site", help="run this site's service (sites that decide)")
    actions = site.add_subparsers(dest="site_command", required=True)
    serve = actions.add_parser(
        "serve", help="answer skfed's named operations on this site's datasets, under its "
                      "policy, with an audit log (gRPC over mutual TLS)")
    serve.add_argument("config", help="the site's TOML configuration")
    check = actions.add_parser("check", help="read the configuration and say what it allows")
    check.add_argument("config", help="the site's TOML configuration")


def run_site(args):
    from ..sites.policy import load_config

    try:
        config = load_config(args.config)
    except (ValueError, OSError) as exc:
        print(f"skfed site: error: {exc}", file=sys.stderr)
        return 2
    if args.site_command == "check":
        print(describe_config(config))
        return 0
    from ..sites.transport import SiteServer

    try:
        server = SiteServer(config).start()
    except (ValueError, OSError, ImportError) as exc:
        print(f"skfed site: error: {exc}", file=sys.stderr)
        return 2
    # the line a supervisor (or a test) waits for: the port actually bound
    print(f"skfed site {config.name!r} serving {sorted(config.datasets)} on port "
          f"{server.port}; audit log {config.audit}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    try:
        server.wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


def describe_config(config):
    """What a site's configuration allows, in words (``skfed site check``)."""
    p = config.policy
    lines = [f"site {config.name!r} listens on {config.listen}",
             f"datasets: " + ", ".join(
                 f"{d.name} ({'all columns' if d.columns is None else ', '.join(d.columns)})"
                 for d in config.datasets.values()),
             "analysts: " + ("any analyst certificate of the federation's CA"
                             if p.analysts is None else ", ".join(p.analysts)),
             "operations: " + ", ".join(p.operations),
             "solvers: " + ("all of skfed's" if p.solvers is None else ", ".join(p.solvers)),
             f"min_rows = {p.min_rows}, min_level_count = {p.min_level_count}, "
             f"max_parameters_per_row = {p.max_parameters_per_row}",
             "require: " + (", ".join(p.require) or "nothing"),
             *(f"analyst {a}: datasets {', '.join(r.get('datasets', ['all']))}; operations "
               f"{', '.join(r.get('operations', ['all served']))}" for a, r in p.access.items()),
             f"privacy: epsilon_budget = {p.epsilon_budget} per dataset, max_delta = "
             f"{p.max_delta}, min_noise_multiplier = {p.min_noise_multiplier}; ledger "
             f"{config.ledger}",
             f"audit log: {config.audit}"]
    return "\n".join(lines)
