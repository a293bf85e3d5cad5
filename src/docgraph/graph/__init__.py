"""Entities, the entity co-occurrence graph, communities and community reports."""
