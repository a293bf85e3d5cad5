"""The corpus of the crash scenarios: ``examples/corpus`` plus generated notes full of entity
names (people, sites, products, error codes, tickets), so the graph has entities and
communities, and the edits that turn it into an incremental build."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

from tests.crash_harness import REPO

SAMPLE_CORPUS = REPO / "examples" / "corpus"
PEOPLE = ["Priya Raman", "Tomas Berg", "Aiko Tanaka", "Lena Fischer", "Omar Haddad",
          "Sofia Marques", "Jonas Weber", "Mei Chen"]
SITES = ["Rotterdam", "Gdansk", "Valencia", "Antwerp", "Tallinn"]
PRODUCTS = ["Heron H7", "Tern T3", "Kestrel K2", "Roost Fleet Manager"]


def generated_note(i: int, rng: random.Random) -> str:
    """A markdown note naming people, sites, products, error codes and tickets."""
    people = rng.sample(PEOPLE, 3)
    site, product = rng.choice(SITES), rng.choice(PRODUCTS)
    code = f"E-{400 + rng.randrange(30)}"
    parts = [f"# Field note {i:03d}: {product} at {site}", ""]
    for j in range(rng.randint(2, 4)):
        ticket = f"OPS-{1000 + rng.randrange(200)}"
        parts += [f"## Visit {j + 1}", "",
                  f"{people[j % 3]} met {people[(j + 1) % 3]} at the {site} site about error "
                  f"{code} on the {product}. Ticket {ticket} tracks firmware 5.{j}.{i % 9}.", "",
                  f"- {people[(j + 2) % 3]} checked the {rng.choice(PRODUCTS)} gateway logs.",
                  f"- Follow-up {i}.{j} is due before the {rng.choice(SITES)} audit.", ""]
    return "\n".join(parts)


def make_corpus(folder: Path, notes: int = 26, seed: int = 11) -> Path:
    """``examples/corpus`` plus ``notes`` generated notes and a file that cannot be
    extracted (recorded as a failure), under ``folder``."""
    shutil.copytree(SAMPLE_CORPUS, folder)
    (folder / "support" / "scan-0001.pdf").write_bytes(b"%PDF-1.4 truncated")
    rng = random.Random(seed)
    for i in range(notes):
        path = folder / "notes" / f"note-{i:03d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(generated_note(i, rng), encoding="utf-8")
    return folder


def mutate_corpus(folder: Path, seed: int = 12) -> None:
    """Edit most notes (one section appended: their other chunks keep their vectors), add
    four, remove three and one sample file, touch four sample files (new timestamp, same
    bytes: only their change token is rewritten) and rename the sample mailbox's attachment
    (its document is replaced by one of the new name, in the mailbox's write)."""
    rng = random.Random(seed)
    mbox = folder / "support" / "brightwell-dock-audit.mbox"
    renamed = mbox.read_bytes().replace(b'filename="daventry-dock-audit-2025-03-31.csv"',
                                        b'filename="daventry-dock-audit-final.csv"')
    assert renamed != mbox.read_bytes()
    mbox.write_bytes(renamed)
    st = mbox.stat()
    os.utime(mbox, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    notes = sorted((folder / "notes").glob("note-*.md"))
    for path in notes[3:]:
        i = int(path.stem.split("-")[1])
        if i % 8 != 7:
            person, site = rng.choice(PEOPLE), rng.choice(SITES)
            path.write_text(path.read_text(encoding="utf-8") + f"\n## Revision\n\n{person} "
                            f"revised note {i} after the {site} audit.\n", encoding="utf-8")
            st = path.stat()
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    for path in notes[:3]:
        path.unlink()
    (folder / "support" / "tern-t3-faq.md").unlink()
    for path in sorted((folder / "engineering").iterdir())[:4]:
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    for i in range(len(notes), len(notes) + 4):
        (folder / "notes" / f"note-{i:03d}.md").write_text(generated_note(i, rng),
                                                            encoding="utf-8")
