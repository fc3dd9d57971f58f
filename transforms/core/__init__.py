"""Pure logic: records, specs, the Example's features, image checks, labels, sharding. No Beam, no I/O."""
