"""One access policy for every server of an index: published in its database, served from
there, checked against each server's policy file when it starts.

Servers on one database share tokens, sessions and settings, so a policy that differed
between them would give one token different rights depending on which server a load
balancer picked, silently. So the policy a fleet serves lives in the database
(:class:`~docgraph.store.policy.PolicyStore`): its canonical form (grants and group
memberships, sorted, duplicates removed; the order and layout of the file do not matter), a
fingerprint of it (sha256) and when it was published; and each running server says so
there every :data:`POLICY_CHECK_SECONDS` (a server silent for :data:`LIVE_SECONDS` counts as
stopped).

- A server that starts while no other server of the index runs publishes its file's policy
  and serves it (so stopping every server and starting them with a new file is one way to
  change the policy). One that starts while servers run joins them when its file grants
  the same, and otherwise refuses to start (:class:`PolicyMismatch`), naming every grant and
  membership that differs, the running servers, and how to roll the change out.
- Running servers serve the published policy (:class:`FleetPolicyEntitlements`), read
  again at most every :data:`POLICY_CHECK_SECONDS`: ``docgraph policy publish FILE``
  changes the rights of the whole fleet at once, within that time, without a restart (the
  rolling change; then update the file of each server, in any order, so a restart joins).
  A policy file edited on a running server is not applied there alone: the server logs once
  how it differs from the fleet's and that ``docgraph policy publish`` applies it.

Role assignments from a SQL table (``[governance] sql_url``) are shared by nature and are
not published.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from docgraph.errors import ConfigError
from docgraph.governance.entitlements import PolicyFileEntitlements, RoleAssignment
from docgraph.store.policy import PolicyStore

log = logging.getLogger(__name__)

#: Seconds a server serves the published policy it read before reading it again (the
#: most a published change takes to reach every server), and between two of its beats.
POLICY_CHECK_SECONDS = 2.0
#: A server whose last beat is older than this counts as stopped (killed, or cut off).
LIVE_SECONDS = 15.0


class PolicyMismatch(ConfigError):
    """A server's policy file differs from the policy its fleet serves."""


def _grant(a: RoleAssignment) -> dict[str, str]:
    who = {"group": a.group} if a.group is not None else {"user": a.user}
    return {**who, "role": a.role, "domain": a.domain}


def _grant_words(grant: Mapping[str, str]) -> str:
    who = f"group {grant['group']}" if "group" in grant else f"user {grant['user']}"
    return f"{who}: role {grant['role']} on domain {grant['domain']}"


@dataclass(frozen=True)
class Policy:
    """A policy in canonical form: grants and group memberships, sorted, without repeats."""

    grants: tuple[tuple[tuple[str, str], ...], ...]
    groups: tuple[tuple[str, tuple[str, ...]], ...]

    @classmethod
    def of(cls, assignments: Iterable[RoleAssignment],
           members: Mapping[str, Iterable[str]]) -> Policy:
        """The canonical form of a policy file's assignments and groups."""
        grants = {tuple(sorted(_grant(a).items())) for a in assignments}
        return cls(tuple(sorted(grants)),
                   tuple(sorted((g, tuple(sorted(set(u)))) for g, u in members.items())))

    def to_data(self) -> dict[str, Any]:
        """The policy as a policy file says it (``groups``, ``assignments``)."""
        grants = [dict(g) for g in self.grants]
        return {"groups": {g: list(users) for g, users in self.groups},
                "assignments": [{k: g[k] for k in ("user", "group", "role", "domain") if k in g}
                                for g in grants]}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Policy:
        """The policy :meth:`to_data` wrote."""
        assignments = [RoleAssignment("", g["role"], g["domain"], g["group"]) if "group" in g
                       else RoleAssignment(g["user"], g["role"], g["domain"])
                       for g in data.get("assignments", [])]
        return cls.of(assignments, data.get("groups", {}))

    @property
    def fingerprint(self) -> str:
        """sha256 of the canonical JSON: equal exactly when the policies grant the same."""
        text = json.dumps(self.to_data(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def assignments(self) -> list[RoleAssignment]:
        """The grants as role assignments."""
        return [RoleAssignment("", g["role"], g["domain"], g["group"]) if "group" in g
                else RoleAssignment(g["user"], g["role"], g["domain"])
                for g in map(dict, self.grants)]

    def members(self) -> dict[str, frozenset[str]]:
        """Group name -> its members' user ids."""
        return {g: frozenset(users) for g, users in self.groups}

    def yaml(self) -> str:
        """The policy as a policy file (what ``docgraph policy show`` prints)."""
        import yaml

        text: str = yaml.safe_dump(self.to_data(), sort_keys=False, default_flow_style=None)
        return text


def differences(fleet: Policy, local: Policy) -> list[str]:
    """Every grant and group membership in which ``local`` (a server's file) differs from
    ``fleet`` (the published policy), one line each: ``+`` only in the file, ``-`` only in
    the fleet's."""
    ours, theirs = set(local.grants), set(fleet.grants)
    lines = [f"+ {_grant_words(dict(g))} (only in this file)" for g in sorted(ours - theirs)]
    lines += [f"- {_grant_words(dict(g))} (only in the fleet's policy)"
              for g in sorted(theirs - ours)]
    mine, fleets = local.members(), fleet.members()
    for group in sorted(set(mine) | set(fleets)):
        added = sorted(mine.get(group, frozenset()) - fleets.get(group, frozenset()))
        removed = sorted(fleets.get(group, frozenset()) - mine.get(group, frozenset()))
        if added or removed:
            change = [f"+{u}" for u in added] + [f"-{u}" for u in removed]
            lines.append(f"group {group} members: {' '.join(change)} (+ only in this file, "
                         "- only in the fleet's policy)")
    return lines


@dataclass(frozen=True)
class Published:
    """The policy a fleet serves, with when it was published."""

    policy: Policy
    published_at: float

    @property
    def fingerprint(self) -> str:
        """The policy's fingerprint."""
        return self.policy.fingerprint

    def to_text(self) -> str:
        """What the store keeps."""
        return json.dumps({"fingerprint": self.fingerprint, "published_at": self.published_at,
                           "policy": self.policy.to_data()}, sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> Published:
        """What :meth:`to_text` wrote (the fingerprint is computed again, never trusted)."""
        data = json.loads(text)
        return cls(Policy.from_data(data["policy"]), float(data["published_at"]))

    def when(self) -> str:
        """When it was published, in UTC."""
        return datetime.fromtimestamp(self.published_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def file_policy(file: PolicyFileEntitlements) -> Policy:
    """The canonical policy a policy file holds now."""
    assignments, members = file.policy()
    return Policy.of(assignments, members)


def mismatch_message(path: Path, fleet: Published, local: Policy,
                     running: Mapping[str, ServerBeat]) -> str:
    """Why a server with the policy file ``path`` does not start, and what to do."""
    lines = "\n  ".join(differences(fleet.policy, local))
    where = ", ".join(sorted({f"{b.host} (pid {b.pid})" for b in running.values()}))
    return (f"policy file {path} differs from the policy the servers of this index serve "
            f"(fingerprint {fleet.fingerprint[:12]}, published {fleet.when()}; running: "
            f"{where or 'none'}), so this server would give the same token other rights; it "
            f"does not start. Differences:\n  {lines}\nTo roll this file's policy out to "
            f"every server, run `docgraph policy publish {path}` (running servers apply it "
            f"within {POLICY_CHECK_SECONDS:g} s, no restart), then start this server; or stop "
            "every server and start them with the new file; or, to join with the fleet's "
            "policy, make the file say what `docgraph policy show` prints.")


def publish(store: PolicyStore, file: PolicyFileEntitlements,
            clock: Callable[[], float] = time.time) -> tuple[Published | None, Published]:
    """Publish ``file``'s policy for every server of the store's index; returns (the
    policy published before, or None; the one published now)."""
    text = store.published()
    before = None if text is None else Published.parse(text)
    now = Published(file_policy(file), clock())
    store.publish(now.to_text())
    return before, now


@dataclass(frozen=True)
class ServerBeat:
    """What a running server's row says: the policy it serves, where it runs, when it last
    said so."""

    fingerprint: str
    host: str
    pid: int
    seen: float

    def to_text(self) -> str:
        """What the store keeps."""
        return json.dumps({"fingerprint": self.fingerprint, "host": self.host,
                           "pid": self.pid, "seen": self.seen}, sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> ServerBeat | None:
        """What :meth:`to_text` wrote, or None for a row that is not one."""
        try:
            data = json.loads(text)
            return cls(str(data["fingerprint"]), str(data["host"]), int(data["pid"]),
                       float(data["seen"]))
        except (ValueError, KeyError, TypeError):
            return None


def live_servers(store: PolicyStore, now: float, *, forget: bool = False
                 ) -> dict[str, ServerBeat]:
    """The servers that said they serve within :data:`LIVE_SECONDS` of ``now``; with
    ``forget``, the rows of the others (stopped or killed servers) are deleted."""
    live: dict[str, ServerBeat] = {}
    for server, text in store.servers().items():
        beat = ServerBeat.parse(text)
        if beat is not None and now - beat.seen <= LIVE_SECONDS:
            live[server] = beat
        elif forget:
            store.leave(server)
    return live


class FleetPolicyEntitlements:
    """Entitlements serving the policy published for the fleet (see the module docstring),
    with this server's policy file watched for changes that are not published. While it
    serves (:meth:`start` to :meth:`stop`) it says so in the store every
    :data:`POLICY_CHECK_SECONDS` and follows the published policy."""

    def __init__(self, store: PolicyStore, file: PolicyFileEntitlements, current: Published,
                 *, check_s: float = POLICY_CHECK_SECONDS) -> None:
        self.store = store
        self.file = file
        self.check_s = check_s
        self.server = uuid.uuid4().hex
        self._current = current
        self._checked = time.monotonic()
        # (the file's policy, the served one) last told about: told once per pair
        self._noted = (current.fingerprint, current.fingerprint)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def current(self) -> Published:
        """The published policy this server serves now."""
        return self._served()

    def beat(self) -> None:
        """Say in the store that this server serves, and which policy."""
        self.store.beat(self.server, ServerBeat(self._current.fingerprint, socket.gethostname(),
                                                os.getpid(), time.time()).to_text())

    def start(self) -> None:
        """Say that this server serves, now and every :attr:`check_s` in a daemon thread
        (which also picks up a newly published policy while no request comes)."""
        self.beat()
        self._thread = threading.Thread(target=self._run, name="docgraph-fleet-policy",
                                        daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def _run(self) -> None:
        while not self._stopped.wait(self.check_s):
            try:
                self._served()
                self.beat()
            except Exception as exc:  # the store is down: requests say so; keep trying
                log.debug("fleet policy heartbeat failed: %s", exc)

    def stop(self) -> None:
        """Stop saying that this server serves, and delete its row (best effort: a server
        that cannot counts as stopped :data:`LIVE_SECONDS` after its last beat)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(self.check_s + 5)
            self._thread = None
            with contextlib.suppress(Exception):
                self.store.leave(self.server)

    def _served(self) -> Published:
        with self._lock:
            if time.monotonic() - self._checked < self.check_s:
                return self._current
            self._checked = time.monotonic()
            text = self.store.published()
            if text is not None and text != self._current.to_text():
                fresh = Published.parse(text)
                if fresh.fingerprint != self._current.fingerprint:
                    log.info("access policy %s (published %s) applies now, replacing %s",
                             fresh.fingerprint[:12], fresh.when(),
                             self._current.fingerprint[:12])
                self._current = fresh
            self._note_file()
            return self._current

    def _note_file(self) -> None:
        """Log once for each pair of (policy file, published policy) that differ: an edited
        file that is not published, or a published policy the file does not say yet (a
        restart would refuse until it does, while other servers run)."""
        served = self._current.fingerprint
        try:
            local = file_policy(self.file)
        except ConfigError as exc:
            if self._noted != ("unreadable", served):
                self._noted = ("unreadable", served)
                log.warning("%s; this server goes on serving the published policy", exc)
            return
        noted, self._noted = self._noted, (local.fingerprint, served)
        if local.fingerprint == served or noted == self._noted:
            return
        lines = "; ".join(differences(self._current.policy, local))
        log.warning("policy file %s differs from the policy every server of the index serves "
                    "(%s): %s. This server serves the published policy; "
                    "`docgraph policy publish %s` publishes the file's for every server, or "
                    "make the file say what `docgraph policy show` prints before a restart",
                    self.file.path, served[:12], lines, self.file.path)

    def assignments_for(self, user_id: str, groups: frozenset[str] = frozenset()
                        ) -> list[RoleAssignment]:
        """Assignments of ``user_id`` and of ``groups`` in the published policy."""
        return [a for a in self._served().policy.assignments() if a.applies_to(user_id, groups)]

    def groups_of(self, user_id: str) -> frozenset[str]:
        """The groups the published policy declares ``user_id`` a member of."""
        return frozenset(g for g, users in self._served().policy.groups if user_id in users)


def join_fleet(store: PolicyStore, file: PolicyFileEntitlements, *, read_only: str = "",
               clock: Callable[[], float] = time.time) -> FleetPolicyEntitlements:
    """The entitlements of a server starting with ``file``, serving (started) when it may:

    - no other server of the index runs: the file's policy is published (unless the
      index is read-only) and served;
    - servers run and the published policy is the file's: it joins them;
    - servers run with another policy: :class:`PolicyMismatch`, naming the differences.

    Two servers starting at once with different files when none ran: both publish, the
    later write wins, and the other, seeing so after saying it serves, refuses."""
    local = Published(file_policy(file), clock())
    text = store.published()
    fleet = None if text is None else Published.parse(text)
    running = live_servers(store, clock(), forget=not read_only)
    if fleet is not None and fleet.fingerprint != local.fingerprint and running:
        raise PolicyMismatch(mismatch_message(file.path, fleet, local.policy, running))
    if fleet is None or fleet.fingerprint != local.fingerprint:
        if fleet is not None:
            log.info("no server of the index runs: this server's policy %s replaces the "
                     "published %s", local.fingerprint[:12], fleet.fingerprint[:12])
        if not read_only:
            store.publish(local.to_text())
        fleet = local
    joined = FleetPolicyEntitlements(store, file, fleet)
    if read_only:
        return joined
    joined.start()
    text = store.published()
    now = None if text is None else Published.parse(text)
    if now is not None and now.fingerprint != local.fingerprint:  # another one won the race
        joined.stop()
        raise PolicyMismatch(mismatch_message(file.path, now, local.policy,
                                              live_servers(store, clock())))
    return joined
