"""Lists of links ("See also", "Related") are navigation: on a short query they no longer
outrank the page they point to, in hybrid and in cohort search, and they are still found."""

from __future__ import annotations

import pytest

from docgraph.retrieve.navigation import is_navigation
from tests.helpers import write_files

NPM_CI = """\
# npm ci

Clean install a project.

## Synopsis

```bash
npm ci
aliases: clean-install, ic, install-clean, isntall-clean
```

## Description

This command is similar to `npm install`, except it's meant to be used in automated
environments such as test platforms, continuous integration, and deployment, or any
situation where you want to make sure you're doing a clean install of your dependencies.
"""

NPM_CIT = """\
# npm install-ci-test

Install a project with a clean slate and run tests.

## Synopsis

```bash
npm install-ci-test
alias: cit
```

## Description

This command runs `npm ci` followed immediately by `npm test`.

## See Also

- [npm ci](npm-ci.md)
- [npm install](npm-install.md)
- [npm test](npm-test.md)
"""

NPM_CIT_RST = """\
npm install-ci-test
===================

Install a project with a clean slate and run tests.

Synopsis
--------

.. code-block:: bash

   npm install-ci-test
   alias: cit

Description
-----------

This command runs ``npm ci`` followed immediately by ``npm test``.

See Also
--------

* :doc:`npm ci <npm-ci>`
* :doc:`npm install <npm-install>`
* :doc:`npm test <npm-test>`
"""

OTHERS = {
    "npm publish": "Publish a package to the registry so that it can be installed by name.",
    "npm audit": "Run a security audit of the dependency tree and report vulnerabilities.",
    "npm config": "Manage the npm configuration files: get, set and list values.",
    "npm run-script": "Run an arbitrary command from the scripts object of a package.",
    "npm cache": "Add, list or clean the npm cache folder, where tarballs are kept.",
    "npm link": "Symlink a package folder into the global folder for development.",
}


@pytest.fixture(params=["md", "rst"])
def npm_docs(request, tmp_path):
    """The npm pages; the one with the See Also list in Markdown (link targets in the
    text) or in reStructuredText (only the links' text: the section title tells)."""
    files = {"npm-ci.md": NPM_CI, f"npm-install-ci-test.{request.param}":
             NPM_CIT if request.param == "md" else NPM_CIT_RST}
    for name, text in OTHERS.items():
        files[name.replace(" ", "-") + ".md"] = (
            f"# {name}\n\n{text}\n\n## Examples\n\nRun `{name} --help` to see every option.\n")
    return write_files(tmp_path / "npm", files)


def _positions(hits):
    page = next(i for i, h in enumerate(hits) if h.source_path == "npm-ci.md")
    see_also = next(i for i, h in enumerate(hits)
                    if h.source_path.startswith("npm-install-ci-test.") and h.section_path[-1:]
                    == ("See Also",))
    return page, see_also


@pytest.mark.parametrize("mode", ["hybrid", "vector_first"])
def test_a_see_also_list_ranks_below_the_page_it_links_to(npm_docs, make_graph, mode):
    graph = make_graph()
    graph.index(npm_docs, namespace="npm")
    hits = graph.search("npm ci", namespaces=["npm"], k=40, mode=mode)
    assert hits[0].section_path[-1:] != ("See Also",)
    page, see_also = _positions(hits)  # the list is still found, below the page
    assert page < see_also


def test_weighing_link_lists_like_any_chunk_brings_the_problem_back(npm_docs, make_graph):
    graph = make_graph(index={"navigation_weight": 1.0})
    graph.index(npm_docs, namespace="npm")
    hits = graph.search("npm ci", namespaces=["npm"], k=10)
    page, see_also = _positions(hits)
    assert see_also < page  # the corpus shows the problem the weight solves


@pytest.mark.parametrize(("text", "path"), [
    ("- [npm ci](npm-ci.md)\n- [npm install](npm-install.md)", ("npm", "Commands")),
    ("- [npm ci](npm-ci.md): clean install\n- <https://docs.npmjs.com/cli>", ()),
    ("- npm ci\n- npm install", ("npm", "See also")),  # HTML, rst, AsciiDoc: no targets
    ("- add_executable\n- add_library", ("cmake", "Related commands:")),
    ("- [npm test](npm-test.md)", ("npm", "See Also")),
])
def test_link_lists_are_navigation(text, path):
    assert is_navigation(text, path)


@pytest.mark.parametrize(("text", "path"), [
    ("- Install Node.js 20\n- Run npm ci in the project folder", ("Usage",)),
    ("npm ci installs from the lock file. See [npm install](npm-install.md).", ("npm",)),
    ("- [npm ci](npm-ci.md)", ("npm",)),  # one link in a body list
    ("- npm ci removes node_modules first and then installs every dependency from the "
     "lock file exactly", ("See also",)),
    ("Read the [guide](g.md) and the [faq](f.md) before you start the installation of "
     "the packages that the project needs.", ("Links",)),
])
def test_content_is_not_navigation(text, path):
    assert not is_navigation(text, path)
