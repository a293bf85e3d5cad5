"""Extractors of the formats organisations keep besides plain documents: slide decks,
workbooks, mail, OpenDocument and EPUB, and scans (OCR). One module per family; each is
registered in :data:`docgraph.ingest.extract.EXTRACTORS`."""
