"""The package's version, apart from its __init__ so that a module needing it
(the manifest's provenance, `--version`) does not import the package's facade."""
__version__ = "0.1.0"
