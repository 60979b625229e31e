"""The guest handoff: durable records, bounded drain, retry worker."""
