"""Documentation sources: reStructuredText (Sphinx, CMake) and AsciiDoc keep their
structure (sections, code, lists, tables), Sphinx-only directives and roles never fail or
leave error text, a folder of them is indexed by default, and a broken file costs only
itself."""

from __future__ import annotations

import time

import pytest

from docgraph.errors import ExtractionError, FileTooLarge
from docgraph.ingest.extract import extract
from docgraph.model import BlockKind
from tests.helpers import write_files

H, P, LI, ROW, CODE = (BlockKind.HEADING, BlockKind.PARAGRAPH, BlockKind.LIST_ITEM,
                       BlockKind.TABLE_ROW, BlockKind.CODE)

SPHINX_PAGE = """\
:Author: Jane Doe

Installing Widgets
==================

Install with :command:`widget install`; see :ref:`the usage guide <usage>` and
:func:`~widgets.core.install`.

.. toctree::
   :maxdepth: 2

   usage
   api

.. note:: Widgets need Python 3.11.

.. _usage:

Usage
-----

Run this::

    $ widget install --all

.. code-block:: python
   :linenos:
   :emphasize-lines: 2

   import widgets
   widgets.install()

* install the **core** package
* install the plugins

  * nested plugin item

.. cmake:command:: add_widget

   Adds a widget target to the build.

.. function:: install(names, *, force=False, \\
                      **options)

   Installs *names*.

   .. versionadded:: 3.5
      The *force* flag.

.. list-table:: Flags
   :header-rows: 1

   * - Flag
     - Meaning
   * - ``--all``
     - every widget

Undefined |release| substitution.
"""

ASCIIDOC_PAGE = """\
= Widget Guide
Jane Doe <jane@example.com>
:product: Widgetizer

// a comment that is not text
{product} installs widgets; read the https://example.com/docs[online docs] and <<usage,Usage>>.

== Usage

.Install everything
[source,bash]
----
$ widget install --all
----

* install the *core* package
** nested plugin item
widget.toml:: the configuration file

////
a comment block
////

[%header]
|===
|Flag |Meaning
|--all |every widget
|===

=== Literal output

....
Installed 3 widgets.
....

include::other.adoc[]
"""


def _pairs(document):
    return [(b.kind, b.text) for b in document.blocks]


def test_rst_sphinx_page_keeps_sections_code_lists_and_tables_without_error_text():
    document = extract(SPHINX_PAGE.encode(), "docs/install.rst")
    assert document.title == "Installing Widgets"
    assert document.media_type == "text/x-rst"
    assert document.metadata["author"] == "Jane Doe"
    assert _pairs(document) == [
        (H, "Installing Widgets"),
        (P, "Install with widget install; see the usage guide and install."),
        (P, "Widgets need Python 3.11."),
        (H, "Usage"),
        (P, "Run this:"),
        (CODE, "$ widget install --all"),
        (CODE, "import widgets\nwidgets.install()"),
        (LI, "install the core package"),
        (LI, "install the plugins"),
        (LI, "nested plugin item"),
        (P, "add_widget"),
        (P, "Adds a widget target to the build."),
        (P, "install(names, *, force=False, **options)"),
        (P, "Installs names."),
        (P, "New in version 3.5: The force flag."),
        (P, "Flags"),
        (ROW, "Flag: --all; Meaning: every widget"),
        (P, "Undefined release substitution."),
    ]
    assert [b.level for b in document.blocks if b.kind is H] == [1, 2]
    body = " ".join(b.text for b in document.blocks)
    for noise in ("Unknown", "ERROR", "toctree", "maxdepth", ":ref:", "linenos"):
        assert noise not in body


def test_asciidoc_page_keeps_sections_code_lists_and_tables():
    document = extract(ASCIIDOC_PAGE.encode(), "docs/guide.adoc")
    assert document.title == "Widget Guide"
    assert document.media_type == "text/asciidoc"
    assert document.metadata["author"] == "Jane Doe <jane@example.com>"
    assert _pairs(document) == [
        (H, "Widget Guide"),
        (P, "Widgetizer installs widgets; read the online docs and Usage."),
        (H, "Usage"),
        (P, "Install everything"),
        (CODE, "$ widget install --all"),
        (LI, "install the core package"),
        (LI, "nested plugin item"),
        (LI, "widget.toml: the configuration file"),
        (ROW, "Flag: --all; Meaning: every widget"),
        (H, "Literal output"),
        (CODE, "Installed 3 widgets."),
    ]
    assert [b.level for b in document.blocks if b.kind is H] == [1, 2, 3]


def test_asciidoc_implicit_table_header_and_unclosed_block():
    text = "== Limits\n\n|===\n|Name |Value\n\n|widgets |12\n|===\n\n----\nnever closed\n"
    document = extract(text.encode(), "limits.asciidoc")
    assert _pairs(document) == [(H, "Limits"), (ROW, "Name: widgets; Value: 12"),
                                (CODE, "never closed")]


@pytest.mark.parametrize("name", ["broken.rst", "broken.adoc", "broken.asciidoc"])
def test_binary_or_empty_documentation_files_fail_naming_the_file(name):
    for data in (bytes(range(256)) * 8, b"", b"\n\n  \n"):
        with pytest.raises(ExtractionError) as info:
            extract(data, name)
        assert name in str(info.value)
        assert "unsupported" not in str(info.value)


def test_malformed_rst_is_read_as_far_as_docutils_can():
    text = ("Title\n=====\n\n  unexpected indent\n\nSub\n---\n\nOther\n=====\n\n"
            "*unclosed emphasis and `unclosed literal\n\n.. unknown-directive:: arg\n\n"
            "   its content\n")
    document = extract(text.encode(), "messy.rst")
    texts = [b.text for b in document.blocks]
    assert "its content" in texts
    assert not any("Unknown" in t or "ERROR" in t for t in texts)


def test_a_folder_of_rst_and_asciidoc_is_indexed_by_default(tmp_path, make_graph):
    folder = write_files(tmp_path / "docs", {
        "install.rst": SPHINX_PAGE,
        "guide.adoc": ASCIIDOC_PAGE,
        "old/notes.asciidoc": "= Notes\n\nThe Rotterdam depot opens at six.\n",
        "bad.rst": bytes(range(256)) * 8,
    })
    graph = make_graph()
    report = graph.index(folder, namespace="docs")
    assert sorted(report.added) == ["guide.adoc", "install.rst", "old/notes.asciidoc"]
    assert [path for path, _ in report.failed] == ["bad.rst"]
    hits = graph.search("Rotterdam depot opens", namespaces=["docs"], k=3)
    assert hits[0].source_path == "old/notes.asciidoc"
    sections = {h.section_path for h in graph.search("widget install all", namespaces=["docs"],
                                                    k=10)}
    assert ("Installing Widgets", "Usage") in sections
    assert ("Widget Guide", "Usage") in sections


def test_asciidoc_attributes_conditionals_and_list_continuations():
    text = """\
= Widgetizer
:uri-org: https://example.com/widgets
:uri-repo: {uri-org}/widgetizer
ifdef::env-github[:status:]
:description: Widgets for everyone

{uri-repo}[Widgetizer] is hosted on {uri-org}/[our site].

ifndef::env-site[]
* {uri-org}/fr[Français]
endif::[]

. Add the gem:
+
[source]
----
gem 'widgetizer'
----
. Save the Gemfile

include::secrets.adoc[]
"""
    document = extract(text.encode(), "widgetizer.adoc")
    assert document.metadata == {"description": "Widgets for everyone"}
    assert _pairs(document) == [
        (H, "Widgetizer"),
        (P, "Widgetizer is hosted on our site."),
        (LI, "Français"),
        (LI, "Add the gem:"),
        (CODE, "gem 'widgetizer'"),
        (LI, "Save the Gemfile"),
    ]


def test_hostile_documentation_files_cost_bounded_time_or_fail_naming_the_limit():
    started = time.perf_counter()
    stars = extract(("*a " * 100_000).encode(), "stars.rst")  # quadratic in docutils
    assert stars.metadata["read_as"].startswith("plain text")
    assert stars.blocks[0].text.startswith("*a *a")
    extract(("*a " * 100_000 + "\n\n== T" + " " * 100_000 + "x\n").encode(), "stars.adoc")
    assert time.perf_counter() - started < 20
    laughs = "".join(f":a{i}: {{a{i - 1}}}{{a{i - 1}}}\n" for i in range(1, 40)) + "{a39}\n"
    with pytest.raises(FileTooLarge) as info:
        extract(laughs.encode(), "laughs.adoc")
    assert "laughs.adoc" in str(info.value) and "max_text_chars" in str(info.value)


def test_no_other_file_is_ever_read(tmp_path, monkeypatch):
    secret = tmp_path / "secret.txt"
    secret.write_text("the launch code is 0000\n", encoding="utf-8")
    (tmp_path / "docutils.conf").write_text(
        "[general]\nfile_insertion_enabled: yes\nraw_enabled: yes\nhalt_level: 1\n",
        encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # a docutils.conf in the working folder is not read
    monkeypatch.setenv("DOCUTILSCONFIG", str(tmp_path / "docutils.conf"))
    rst = (f"Page\n====\n\n.. include:: {secret}\n\n.. literalinclude:: {secret}\n\n"
           f".. raw:: html\n   :file: {secret}\n\n.. csv-table::\n   :file: {secret}\n\n"
           "Visible text.\n")
    adoc = f"= Page\n\ninclude::{secret}[]\n\nVisible text.\n"
    for data, name in ((rst, "page.rst"), (adoc, "page.adoc")):
        document = extract(data.encode(), name)
        assert [b.text for b in document.blocks] == ["Page", "Visible text."]
