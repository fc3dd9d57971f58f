"""Install with `pip install .`; Dataflow stages the same file with --setup_file ./setup.py."""
import pathlib
import re

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"', (HERE / "pipelines" / "_version.py").read_text()).group(1)

# pipelines/ is the package tfrecord_pipelines (the application and its API);
# transforms/ (the library) is its subpackage tfrecord_pipelines.transforms.
PACKAGE_DIR = {"tfrecord_pipelines": "pipelines", "tfrecord_pipelines.transforms": "transforms"}
PACKAGES = (["tfrecord_pipelines"] + [f"tfrecord_pipelines.{p}" for p in find_packages("pipelines")]
            + ["tfrecord_pipelines.transforms"]
            + [f"tfrecord_pipelines.transforms.{p}" for p in find_packages("transforms")])

setup(
    name="tfrecord-pipelines",
    version=VERSION,
    description="Image folders and label tables to deterministic TFRecord shards, with Apache Beam",
    long_description=(HERE / "README.md").read_text(encoding="utf-8") if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # One import name, tfrecord_pipelines: the repository's folders are mapped into it, so
    # nothing generic (`pipelines`, `transforms`) lands on sys.path to clash with a user's own.
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    package_data={"tfrecord_pipelines": ["sample_photos/*"]},
    install_requires=[
        # The Beams the tests run on: constraints.txt's (the newest) and constraints-beam-oldest.txt's
        # (make test-beam-oldest). Below 2.74, Beam's [gcp] extra needs google-cloud-storage<3;
        # below 2.69, protobuf<6 (TensorFlow 2.21 needs >=6.31.1). A range, so that pip keeps the
        # Beam a user's virtualenv (or Dataflow's worker image of the launcher's Beam) already holds;
        # the Flex Template's image carries constraints.txt's Beam (launch/flex_template/Dockerfile).
        "apache-beam[gcp]>=2.74,<3",
        "tensorflow>=2.21,<2.22",
        "tfx-bsl>=1.21,<1.22",
        "google-cloud-storage>=3.0,<4",
        "google-crc32c>=1.5",
        "pillow>=12,<13",
        # --output_format array_record: ArrayRecord's writer (no wheels for Python 3.10;
        # the writer imports it only when the format is asked for).
        "array-record>=0.8.6,<0.9; python_version >= '3.11'",
        # The perceptual hash's DCT and bit counts (transforms/core/quality.py); pinned in constraints.txt.
        "numpy>=2.0,<3",
        # The progress bar of a local run (a terminal or a notebook: tqdm.auto); pinned in constraints.txt.
        "tqdm>=4.66,<5",
        # Rows from a DataFrame (tfrecord_pipelines.convert(label_table=df)); tfx-bsl needs pandas anyway.
        # Below 2.4: inside IPython/Jupyter, Beam 2.77 imports its DataFrame API to build any pipeline,
        # and that fails on pandas 3 (`DataFrame.first` is gone): no conversion could run in a notebook.
        "pandas>=2.0,<2.4",
        # --annotations: COCO JSON streamed (yajl2's C parser), whatever its size; COCO's
        # polygon and RLE masks drawn as the COCO tools draw them (--masks png).
        "ijson>=3.3,<4",
        "pycocotools>=2.0.8,<3",
    ],
    extras_require={
        # The readers the tests load outputs with: TFDS (builder_from_directory) and
        # the PyTorch `tfrecord` package's reader (it imports without torch).
        # pytest-xdist: `make test` runs the suite on a process per core (most tests are one conversion
        # on one thread: 37 min sequential, 22 min on 2 cores).
        "test": ["pytest>=8", "pytest-xdist>=3.8,<4", "gcp-storage-emulator>=2026.7", "hypothesis>=6.100",
                 "tensorflow-datasets>=4.9.10,<4.10", "tfrecord>=1.14.6,<2",
                 # Grain reads the ArrayRecord shards (random access by index)
                 "grain>=0.2.18,<0.3; python_version >= '3.11'",
                 # examples/quickstart.ipynb, run headless by tests/e2e/test_notebook.py
                 "nbclient>=0.11,<0.12", "nbformat>=5.10,<6", "ipykernel>=7,<8", "matplotlib>=3.10,<4",
                 # the documentation site (docs/, mkdocs.yml), built --strict by tests/e2e/test_docs_site.py
                 "mkdocs>=1.6,<2", "mkdocs-material>=9.8,<10", "mkdocstrings[python]>=1.0,<2"],
        # What examples/quickstart.ipynb needs beyond the package: its grid of images (matplotlib).
        "notebook": ["matplotlib>=3.10,<4"],
        # bench/peers.py's peers, in a virtualenv of their own (never installed by CI or `make`):
        # Ray Data (read_binary_files + write_tfrecords) and litData's optimize().
        "peers": ["ray[data]==2.60.0", "crc32c==2.9.post0", "litdata==0.2.76"],
    },
    entry_points={"console_scripts": ["tfrecords=tfrecord_pipelines.cli:main"]},
)
