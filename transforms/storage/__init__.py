"""I/O helpers: local and gs:// files, bucket reads, listings, the output folder's layout."""
