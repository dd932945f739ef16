"""A site's configuration fails closed: an unknown table or key stops the service, an
empty list means nothing, and ``skfed site check`` lists every problem at once."""

import subprocess
import sys

import pytest

pytest.importorskip("cryptography")

from sklearn.datasets import load_diabetes  # noqa: E402

from skfed.cli.main import main  # noqa: E402
from skfed.deploy import make_certificates  # noqa: E402
from skfed.sites.policy import check_config, load_config, served_by_default  # noqa: E402

from ._sites import site_config  # noqa: E402


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certs"), ["hospital-a"])


@pytest.fixture
def write(tmp_path, certs):
    """Write a configuration for hospital-a (one dataset, ``visits``), then apply
    ``edits``: ``{old: new}`` replacements of its text."""

    def write(policy="", extra="", columns=None, edits=(), declare=""):
        path = site_config(tmp_path, "hospital-a", certs=certs,
                           datasets={"visits": ("visits.csv", columns)}, policy=policy,
                           extra=extra, declare=declare)
        text = path.read_text()
        for old, new in dict(edits).items():
            assert old in text
            text = text.replace(old, new)
        path.write_text(text)
        return path

    return write


# --- unknown tables and keys stop the service -------------------------------------------
def test_an_unknown_table_is_refused_not_ignored(write):
    # its require would silently not apply: the site would serve unprotected fits
    path = write(extra='[polcy]\nrequire = ["secure_aggregation", "differential_privacy"]')
    with pytest.raises(ValueError, match=r"unknown table \[polcy\] \(did you mean \[policy\]"):
        load_config(path)


def test_a_misspelt_column_list_is_refused(write):
    # colums would have served every column of the file
    path = write(columns=["age", "bmi"], edits={"columns =": "colums ="})
    with pytest.raises(ValueError, match=r"\[datasets.visits\] has an unknown key 'colums' "
                                         r"\(did you mean 'columns'\?\)"):
        load_config(path)


@pytest.mark.parametrize("table, key, close", [("[site]", "lisen", "listen"),
                                                ("[tls]", "keyfile", "key"),
                                                ("[audit]", "paths", "path")])
def test_an_unknown_key_in_a_table_is_refused(write, table, key, close):
    path = write(edits={f"{table}\n": f'{table}\n{key} = "x"\n'})
    with pytest.raises(ValueError, match=rf"\{table[:-1]}\] has an unknown key '{key}' "
                                         rf"\(did you mean '{close}'\?\)"):
        load_config(path)


def test_an_unknown_key_in_an_access_table_is_refused(write):
    path = write(extra='[access.analyst]\ndataset = ["visits"]')
    with pytest.raises(ValueError, match=r"\[access.analyst\] has an unknown key 'dataset' "
                                         r"\(did you mean 'datasets'\?\)"):
        load_config(path)


def test_an_unknown_top_level_key_is_refused(write):
    path = write(edits={"[site]\n": "min_rows = 3\n[site]\n"})
    with pytest.raises(ValueError, match="unknown top-level key 'min_rows'"):
        load_config(path)


# --- an empty list means nothing, never everything -------------------------------------
def test_no_operation_is_refused_at_load(write):
    with pytest.raises(ValueError, match=r"operations = \[\] serves no operation"):
        load_config(write(policy="operations = []"))
    policy = load_config(write()).policy  # absent: every declared operation
    assert policy.operations is None and all(policy.serves(op) for op in served_by_default())


def test_no_analyst_is_refused_at_load(write):
    with pytest.raises(ValueError, match=r"analysts = \[\] allows no analyst"):
        load_config(write(policy="analysts = []"))


def test_no_column_is_refused_at_load(write, tmp_path):
    with pytest.raises(ValueError, match=r"columns = \[\]: the site would serve no column"):
        load_config(write(columns=[]))
    # beside a dataset that serves columns, columns = [] is that dataset's: none
    path = write(columns=[], extra='[datasets.other]\npath = "other.csv"')
    assert load_config(path).datasets["visits"].columns == ()
    assert load_config(path).datasets["other"].columns is None


def test_empty_solvers_and_losses_allow_none(write):
    policy = load_config(write(policy="solvers = []\nlosses = []")).policy
    assert policy.solvers == () and policy.losses == ()
    assert load_config(write()).policy.solvers is None  # absent: all of skfed's


def test_empty_solvers_refuse_every_fit_at_a_real_service(write, certs, tmp_path):
    pytest.importorskip("grpc")
    from skfed import FederatedDataset, FedLasso
    from skfed.sites import SiteRefusal
    from skfed.sites.transport import SiteServer

    load_diabetes(as_frame=True).frame.iloc[:120].to_csv(tmp_path / "visits.csv", index=False)
    server = SiteServer(load_config(write(policy="solvers = []"))).start()
    data = None
    try:
        data = FederatedDataset.from_sites(
            {"hospital-a": f"127.0.0.1:{server.port}"}, dataset="visits", target="target",
            ca_file=certs.ca.cert, cert_file=certs.client.cert, key_file=certs.client.key)
        with pytest.raises(SiteRefusal, match="is not allowed at this site") as info:
            FedLasso(alpha=1.0).fit(data)
        assert info.value.rule == "solvers"
    finally:
        if data is not None:
            data.close()
        server.stop()


# --- skfed site check and skfed site serve -----------------------------------------------
def test_check_lists_every_problem_at_once(write, capsys):
    path = write(policy="operations = []\nmin_rows = 0", columns=["age"],
                 extra='[polcy]\nrequire = ["secure_aggregation"]\n'
                       '[access.analyst]\ndataset = ["visits"]',
                 edits={"columns =": "colums =", "[tls]\n": '[tls]\ncrl = "x"\n'})
    assert main(["site", "check", str(path)]) == 2
    err = capsys.readouterr().err
    expected = ["unknown table [polcy]", "[tls] has an unknown key 'crl'",
                "[datasets.visits] has an unknown key 'colums'",
                "operations = [] serves no operation", "min_rows must be an integer >= 1",
                "[access.analyst] has an unknown key 'dataset'"]
    for problem in expected:
        assert problem in err, problem
    assert f"{len(expected)} problems in" in err
    _, problems = check_config(path)
    assert len(problems) == len(expected)
    with pytest.raises(ValueError) as info:  # load_config names them all, one a line
        load_config(path)
    assert str(info.value).splitlines() == problems


def test_check_describes_a_good_configuration(write, capsys):
    path = write(policy='min_rows = 20\nsolvers = []\nrequire = ["secure_aggregation"]\n'
                        'consortium = ["hospital-a", "hospital-b"]',
                 extra='[access.analyst]\noperations = []')
    assert main(["site", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "site 'hospital-a'" in out and "min_rows = 20" in out
    assert "solvers: none" in out and "require: secure_aggregation" in out
    assert "analyst analyst: datasets all; operations none" in out
    assert "the rows of kept_datasets = 4 dataset references (all analysts), fit states " \
        "of fit_state_mb = 2048 MB a fit and analyst_state_mb = 4096 MB an analyst" in out


def test_serve_stops_on_an_unknown_table(write):
    path = write(extra='[polcy]\nrequire = ["secure_aggregation"]')
    done = subprocess.run([sys.executable, "-m", "skfed", "site", "serve", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "unknown table [polcy]" in done.stderr
    assert "serving" not in done.stdout


# --- the keys of issue 35: each refused with its reason when malformed -------------------
@pytest.mark.parametrize("policy, declare, problem", [
    ('require = ["secure_aggregation"]', "", "needs a consortium = [...]"),
    ('require = ["secure_aggregation"]\nconsortium = ["hospital-b", "hospital-c"]', "",
     "consortium must name this site ('hospital-a')"),
    ('require = ["secure_aggregation"]\nconsortium = ["hospital-a", "hospital-b"]',
     'consortium = ["hospital-a"]', "consortium needs at least two sites"),
    ("dominance = 1.5", "", "dominance must be below 1"),
    ("dominance = 0.2", "", "dominance must be a number >= 0.5"),
    ('finer_sums = ["stats.describe"]', "", "which releases no finer sums; the operations "
                                            "that do are ['boosting.histograms'"),
    ('formulas = "everything"', "", "formulas must be one of ['none', 'declared', 'closed']"),
    ("", 'weights = "w"', "weights must be a list of strings"),
    ("", "domains = { age = [5, 1] }", "age: a range is [low, high] with finite numbers"),
    ("", 'population = "some"', "population must be one of ['all', 'complete']"),
    ("", 'transforms = ["np.log(age"]', "transforms: 'np.log(age' is not a formula term"),
    ("", 'transforms = ["np.abs(age - 50)"]', "abs() makes a row indicator"),
], ids=["consortium-missing", "consortium-without-self", "dataset-consortium", "dominance-1",
        "dominance-low", "finer-sums", "formulas", "weights", "domains", "population",
        "transform-syntax", "transform-indicator"])
def test_the_release_rules_keys_fail_closed(write, policy, declare, problem):
    _, problems = check_config(write(policy=policy, declare=declare))
    assert any(problem in p for p in problems), problems


def test_the_release_rules_keys_are_read(write):
    path = write(policy='require = ["secure_aggregation"]\n'
                        'consortium = ["hospital-a", "hospital-b", "hospital-c"]\n'
                        'dominance = 0.8\nfiner_sums = ["fit.risk_sets"]\nformulas = "declared"',
                 declare='weights = ["w"]\ndomains = { bmi = [10, 60] }\n'
                         'population = "complete"\ntransforms = ["np.log(bmi)"]')
    config = load_config(path)
    policy, visits = config.policy, config.datasets["visits"]
    assert policy.consortium == ("hospital-a", "hospital-b", "hospital-c")
    assert policy.dominance == 0.8 and policy.finer_sums == ("fit.risk_sets",)
    assert policy.formulas == "declared"
    assert visits.weights == ("w",) and visits.domains == {"bmi": (10.0, 60.0)}
    assert visits.population == "complete" and visits.transforms == ("np.log(bmi)",)
    # the defaults: the rule at 0.95, the finer sums of the exact methods, the closed
    # vocabulary, a local fit bounded in iterations and seconds
    default = load_config(write()).policy
    assert default.dominance == 0.95 and default.formulas == "closed"
    assert set(default.finer_sums) == {"fit.cox_baseline", "fit.risk_sets",
                                       "survival.schoenfeld_sums"}
    assert default.max_local_iterations == 10_000 and default.max_request_seconds == 100


def test_the_kept_datasets_key_bounds_the_rows_a_site_keeps(write):
    """``kept_datasets``: the dataset references whose rows (and boosting fits' states)
    the site keeps between requests, all analysts together; four unless it says."""
    from skfed.sites.rows import SiteRows

    assert load_config(write()).policy.kept_datasets == 4
    for bad in ("kept_datasets = 0", "kept_datasets = 1.5"):
        _, problems = check_config(write(policy=bad))
        assert any("kept_datasets must be an integer >= 1" in p for p in problems), problems
    rows = SiteRows(load_config(write(policy="kept_datasets = 2")))
    for analyst, drop in [("a", "x"), ("b", "x"), ("b", "y"), ("a", "y")]:
        rows.kept(analyst, {"name": "visits", "drop": [drop]}, lambda: (analyst, drop))
    assert list(rows._kept.values()) == [("b", "y"), ("a", "y")]


def test_kept_rows_go_from_the_analyst_who_keeps_the_most():
    """The kept rows to drop: the least recently used of the analyst keeping the most
    references (among equals, the least recently used of all)."""
    from skfed.sites.rows import _kept_to_evict

    kept = dict.fromkeys([("a", "1"), ("b", "1"), ("b", "2"), ("c", "1"), ("b", "3")])
    assert _kept_to_evict(kept) == ("b", "1")
    assert _kept_to_evict(dict.fromkeys([("a", "1"), ("c", "1"), ("b", "1")])) == ("a", "1")
    assert _kept_to_evict(dict.fromkeys([("a", "1"), ("c", "1"), ("c", "2"), ("a", "2")])) \
        == ("a", "1")


def test_the_officers_page_lists_every_policy_key():
    """``docs/data-officers.md`` has a row for every key ``[policy]`` takes."""
    import pathlib
    import re

    from skfed.sites.policy import POLICY_KEYS

    page = pathlib.Path(__file__).resolve().parents[1] / "docs" / "data-officers.md"
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", page.read_text(), re.MULTILINE))
    assert set(POLICY_KEYS) <= rows, sorted(set(POLICY_KEYS) - rows)
