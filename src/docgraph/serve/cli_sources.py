"""The CLI's ``sources`` and ``tags`` command groups: document folders, SQL sources and
their column tags. Registered on the root app by :mod:`docgraph.serve.cli`."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from docgraph.serve.cli_common import WaitOption, as_builder, console, open_index

DomainOption = Annotated[str, typer.Option("--domain", "-d", help="Domain (= namespace).")]


NameOption = Annotated[
    str | None, typer.Option("--name", help="Display name agents see instead of the URN "
                                            "(default: the folder's last path component, "
                                            "unique in the domain).")]
PublicUrlOption = Annotated[
    str | None, typer.Option("--public-url", help="Base URL citations link to (the folder "
                                                  "on the intranet, S3 console, ...); "
                                                  "'{path}' marks where the path goes.")]


def sources_add(
    urn: Annotated[str, typer.Argument(help="Folder: local path, file://, s3://, sftp://, "
                                            "ftp:// or hdfs:// URN (no credentials).")],
    domain: DomainOption,
    name: NameOption = None,
    public_url: PublicUrlOption = None,
) -> None:
    """Register a document folder in a domain (indexed by the next `docgraph refresh`)."""
    with open_index() as dg:
        record = dg.sources.add_folder(urn, domain, display_name=name, public_url=public_url)
    console.print(f"[bold]{escape(record.urn)}[/] in domain [cyan]{escape(record.namespace)}[/]"
                  f" as [green]{escape(record.display_name or '-')}[/]"
                  + (f" -> {escape(record.public_url)}" if record.public_url else ""))


def sources_set(
    urn: Annotated[str, typer.Argument(help="The folder as registered (any spelling).")],
    domain: DomainOption,
    name: NameOption = None,
    public_url: PublicUrlOption = None,
    no_public_url: Annotated[bool, typer.Option("--no-public-url",
                                                help="Remove the public URL.")] = False,
) -> None:
    """Rename a folder as agents see it or change its public URL (ids in the stored URN
    form keep resolving)."""
    with open_index() as dg:
        record = dg.sources.update_folder(urn, domain, display_name=name,
                                          public_url=public_url,
                                          clear_public_url=no_public_url)
    console.print(f"[bold]{escape(record.urn)}[/] in domain [cyan]{escape(record.namespace)}[/]"
                  f" as [green]{escape(record.display_name)}[/]"
                  + (f" -> {escape(record.public_url)}" if record.public_url else ""))


def sources_remove(
    urn: Annotated[str, typer.Argument(help="The folder as registered (any spelling).")],
    domain: DomainOption,
    wait: WaitOption = 0.0,
) -> None:
    """Unregister a folder from a domain and delete everything indexed from it (as the
    index's one builder, like `index`)."""
    with open_index() as dg:
        removed = as_builder("not removed",
                              lambda: dg.remove_folder(urn, domain, wait_seconds=wait))
    console.print(f"removed; {removed} document(s) deleted")


def sources_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
                 ) -> None:
    """Every source: folders, SQL sources and derived (read-only) table sources."""
    with open_index(read=True) as dg:
        found = dg.sources.list()
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(s) for s in found], indent=2) + "\n")
        return
    table = Table("kind", "type", "urn", "domain", "name", "public url", "read-only",
                  "credentials from")
    for s in found:
        table.add_row(s.kind, s.type, escape(s.urn), escape(s.domain or "-"),
                      escape(s.display_name or ""), escape(s.public_url or ""),
                      "yes" if s.read_only else "", escape((s.credential_env or "") + "*"
                                                           if s.credential_env else ""))
    console.print(table)


def sources_add_sql(
    name: Annotated[str, typer.Argument(help="Name of the SQL source, e.g. crm.")],
    url: Annotated[str, typer.Argument(help="SQLAlchemy URL; the password is not stored.")],
) -> None:
    """Register a SQL database whose columns can be tagged (kind relational)."""
    with open_index() as dg:
        source = dg.sources.add_sql_source(name, url)
    console.print(f"[bold]{escape(source.name)}[/] = {escape(source.url)}; credentials from "
                  f"{source.credential_env}* or the secrets file")


def sources_remove_sql(name: Annotated[str, typer.Argument(help="SQL source name.")],
                       wait: WaitOption = 0.0) -> None:
    """Unregister a SQL source, its tags and the documents derived from them (as the
    index's one builder, like `index`)."""
    with open_index() as dg:
        removed = as_builder("not removed",
                              lambda: dg.sources.remove_sql_source(name, wait_seconds=wait))
    console.print(f"removed; {removed} document(s) deleted")


def _column(spec: str) -> tuple[str | None, str, str]:
    parts = spec.split(".")
    if len(parts) == 2:
        return None, parts[0], parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    raise typer.BadParameter(f"{spec!r}: use [schema.]table.column")


def tags_set(
    source: Annotated[str, typer.Argument(help="SQL source name.")],
    column: Annotated[str, typer.Argument(help="[schema.]table.column")],
    tag: Annotated[str, typer.Argument(help="natural_language or `entity:<type>`")],
    domain: Annotated[
        str | None, typer.Option("--domain", "-d", help="Domain of natural_language rows.")
    ] = None,
) -> None:
    """Tag a column (checked against the database now)."""
    schema, table, name = _column(column)
    with open_index() as dg:
        found = dg.sources.set_tag(source, table, name, tag, schema=schema, domain=domain)
    console.print(f"{escape(found.label())} tagged {found.tag}"
                  + (f" in domain {escape(found.domain)}" if found.domain else ""))


def tags_remove(
    source: Annotated[str, typer.Argument(help="SQL source name.")],
    column: Annotated[str, typer.Argument(help="[schema.]table.column")],
    tag: Annotated[str, typer.Argument(help="natural_language or `entity:<type>`")],
    domain: Annotated[str | None, typer.Option("--domain", "-d", help="Domain.")] = None,
    wait: WaitOption = 0.0,
) -> None:
    """Remove a tag; removing natural_language deletes its row documents (as the index's
    one builder, like `index`)."""
    schema, table, name = _column(column)
    with open_index() as dg:
        removed = as_builder("not removed", lambda: dg.sources.remove_tag(
            source, table, name, tag, schema=schema, domain=domain, wait_seconds=wait))
    console.print(f"removed; {removed} document(s) deleted")


def tags_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
              ) -> None:
    """Every column tag."""
    with open_index(read=True) as dg:
        found = dg.sources.tags()
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(t) for t in found], indent=2) + "\n")
        return
    table = Table("source", "column", "tag", "domain", "primary key")
    for t in found:
        table.add_row(escape(t.source), escape(f"{t.schema}.{t.table}.{t.column}"), t.tag,
                      escape(t.domain or "-"), escape(t.pk_column or "-"))
    console.print(table)

