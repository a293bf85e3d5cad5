"""The CLI's ``policy`` command group: the access policy every server of an index serves
(:mod:`docgraph.governance.fleet_policy`). Registered on the root app by
:mod:`docgraph.serve.cli`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from docgraph.errors import ConfigError
from docgraph.serve.cli_common import console, err, open_index


def policy_publish(
    file: Annotated[
        Path | None, typer.Argument(help="The policy file to publish (default "
                                         "governance.policy_file).")
    ] = None,
) -> None:
    """Publish a policy file as the access policy of every server of the index: running
    servers apply it within seconds, without a restart, and a server whose own policy file
    differs from it does not start. Prints how it differs from the policy it replaces."""
    from docgraph.governance import PolicyFileEntitlements
    from docgraph.governance.fleet_policy import POLICY_CHECK_SECONDS, differences, publish

    with open_index(read=True) as dg:
        path = file or dg.settings.governance.policy_file
        if path is None:
            raise ConfigError("policy publish: name a policy file, or set "
                              "governance.policy_file")
        before, now = publish(dg.ports.policy, PolicyFileEntitlements(path))
    if before is not None and before.fingerprint == now.fingerprint:
        console.print(f"policy {now.fingerprint[:12]} was already published; nothing changed")
        return
    for line in ([] if before is None else differences(before.policy, now.policy)):
        console.print(escape(line.replace("only in this file", "new")
                             .replace("only in the fleet's policy", "removed")))
    console.print(f"published policy {now.fingerprint[:12]} from {escape(str(path))}: every "
                  f"server of the index applies it within {POLICY_CHECK_SECONDS:g} s; "
                  "update the policy file of each server to match before it restarts")


def policy_show() -> None:
    """Print the access policy published for the servers of the index, as a policy file
    (its fingerprint and when it was published on stderr)."""
    from docgraph.governance.fleet_policy import Published

    with open_index(read=True) as dg:
        text = dg.ports.policy.published()
    if text is None:
        err.print("no policy is published for this index yet: the first `docgraph serve` "
                  "publishes its policy file's, or run `docgraph policy publish FILE`")
        raise typer.Exit(1)
    published = Published.parse(text)
    err.print(f"policy {published.fingerprint} published {published.when()}")
    sys.stdout.write(published.policy.yaml())
