"""Which embedding model should be the default: quality on the test halves against the time a
user waits for it (issue 35).

    python bench/models.py [--rounds 2] [--queries 40] [--name models]

The decision rule, stated before any figure of this bench existed:

``e5-small-4bit`` replaces ``minilm-l6-int8`` as the default only if all three hold:

1. **quality**: on the test halves, e5's default lookup path (``vector_first``, each model
   with its own tuned profile) beats MiniLM's on the mean of the headline metrics
   (SciFact nDCG@10; 2Wiki (R@2 + R@5) / 2), with the paired-bootstrap 95% interval of the
   per-query difference above zero on at least one set and not entirely below zero on any;
2. **ingest**: e5's pipeline chunks/s on this machine is at least half of MiniLM's (a first
   build takes at most twice as long: ``make run``'s minute becomes at most two);
3. **query**: e5's ``lookup_knowledge`` p50 is at most twice MiniLM's and under 150 ms.

Quality is paid on every query and the build once, hence the generous ingest bound; a
lookup an agent waits for on every turn gets the tighter one.
"""
