"""Sphinx configuration: ``make -C docs html`` (warnings are errors)."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))
import skfed  # noqa: E402

project = "skfed"
author = "skfed developers"
copyright = "skfed developers, BSD-3-Clause"  # noqa: A001
release = version = skfed.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.json", "auto_examples/*.md5",
                    "sg_execution_times.rst"]
myst_heading_anchors = 3
autosummary_generate = True
templates_path = ["_templates"]
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# no intersphinx: the build must not need the network (CI has none); references to
# other projects' objects stay plain text

html_theme = "pydata_sphinx_theme"
html_title = f"skfed {version}"
html_theme_options = {"navigation_depth": 2, "show_toc_level": 2}

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "within_subsection_order": "FileNameSortKey",
    "remove_config_comments": True,
}
html_static_path = ["_static"]
