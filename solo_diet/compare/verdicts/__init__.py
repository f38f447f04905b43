"""The verdicts: results in, seed aggregates, resolved gaps and claims' verdicts out."""
