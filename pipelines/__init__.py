"""tfrecord-pipelines: image datasets to deterministic TFRecord shards with Apache Beam."""
__version__ = "0.1.0"
