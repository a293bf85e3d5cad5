"""Turning bytes into stored chunks, incrementally: extract, chunk, embed, write."""
