"""Reading finished outputs: verify, inspect, spec's reading code, versions
of a dataset root, and what killed runs left (cleanup)."""
