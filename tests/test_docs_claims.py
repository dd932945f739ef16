"""The docs do not say that a feature skfed has is missing.

Each entry: a phrase a page would use for the feature, and where skfed has it. A
sentence of a docs page (or the README) that names the phrase and says it is not
there ("not implemented", "not in skfed", "not built") fails while the feature
imports: a page that went stale when the feature landed.
"""

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

#: ``(phrase in a sentence, module, attribute)``: where the feature lives
FEATURES = [
    ("cox regression", "skfed", "FedCoxPH"),
    ("cox model", "skfed", "FedCoxPH"),
    ("random-effects model", "skfed.mixed", "FedMixedLM"),
    ("mixed model", "skfed.mixed", "FedMixedLM"),
    ("meta-analysis", "skfed.stats", "meta_analysis"),
    ("gradient boosting", "skfed.ensemble", "FedHistGradientBoostingRegressor"),
    ("boosted trees", "skfed.ensemble", "FedHistGradientBoostingRegressor"),
    ("formula", "skfed.formula", "glm"),
    ("kaplan-meier", "skfed.stats", "kaplan_meier"),
]

MISSING = re.compile(r"not implemented|not in skfed|not built|not available in skfed|"
                     r"skfed has no|does not have", re.IGNORECASE)


def _has(module, attribute):
    try:
        return hasattr(importlib.import_module(module), attribute)
    except ImportError:
        return False


def _sentences(text):
    # a paragraph's lines joined, then cut at sentence ends
    flat = re.sub(r"\s*\n\s*", " ", text)
    return re.split(r"(?<=[.!?])\s+", flat)


def stale_claims(pages=PAGES):
    """``(page, sentence, feature)`` of every sentence saying a feature skfed has is
    missing."""
    found = []
    built = [(phrase, f"{m}.{a}") for phrase, m, a in FEATURES if _has(m, a)]
    for page in pages:
        for sentence in _sentences(page.read_text()):
            if not MISSING.search(sentence):
                continue
            for phrase, where in built:
                if phrase in sentence.lower():
                    found.append((page.name, sentence.strip()[:200], where))
    return found


def test_no_page_says_a_built_feature_is_missing():
    assert stale_claims() == []


def test_the_check_finds_a_stale_sentence(tmp_path):
    page = tmp_path / "stale.md"
    page.write_text("Kaplan-Meier curves and Table 1 are here.\nCox regression is not\n"
                    "implemented yet.\n")
    assert [(p, w) for p, _, w in stale_claims([page])] == [("stale.md", "skfed.FedCoxPH")]
