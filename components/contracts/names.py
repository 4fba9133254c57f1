"""Names shared between the steps, the pipeline factory and the CLI summary: split folders,
the files inside each artifact, SavedModel signatures and outputs. (The steps' own names
are the step registry's, pipelines/steps.py.)"""

# Split folders written by ingest.
TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"
SPLITS = (TRAIN_SPLIT, EVAL_SPLIT)

# Files inside artifacts.
MANIFEST_FILE = "manifest.json"
STATS_FILE = "stats.pb"  # DatasetFeatureStatisticsList, one dataset per split (also stored with each served version)
SCHEMA_FILE = "schema.pbtxt"
ANOMALIES_FILE = "anomalies.pbtxt"
ANOMALIES_SUMMARY = "anomalies.md"
BLESSING_FILE = "blessing.json"
PUSH_RESULT_FILE = "push.json"
TRAIN_REPORT_FILE = "report.json"  # train's report artifact: the training report, with the per-epoch history
EVALUATION_FILE = "evaluation.json"  # inside the blessing artifact: metrics, confusion matrix, slices, curves
VALIDATION_FILE = "validation.json"  # inside the anomalies artifact: anomaly and drift lines, the baseline
DRIFT_ANOMALIES_FILE = "drift-" + ANOMALIES_FILE  # inside the anomalies artifact: TFDV's drift measurements
RUN_REPORT_PAGE = "report.html"  # the run report, beside a local run
FEATURE_SPECS_FILE = "gpupipe_features.json"  # inside the SavedModel's assets.extra/

# SavedModel signatures.
SERVING_SIGNATURE = "serving_default"
EXAMPLES_SIGNATURE = "serving_examples"
DECODED_SIGNATURE = "serving_decoded"  # with image features: the images as float pixels
PROBABILITIES = "probabilities"
CLASSES = "classes"
PREDICTIONS = "predictions"  # regression output

# The trainer's progress lines in the task log (epoch, step, loss, examples/s, ETA); `gpupipe
# run` shows them live.
PROGRESS_PREFIX = "progress:"

# Local scratch for the trainer's disk input cache: on the cluster an emptyDir mounted here
# and named by this environment variable.
SCRATCH_ENV = "GPUPIPE_SCRATCH_DIR"
SCRATCH_MOUNT = "/gpupipe-scratch"
SCRATCH_VOLUME = "gpupipe-scratch"

# Where the trainer keeps parsed batches after the first epoch (training report: input_cache).
CACHE_NONE, CACHE_MEMORY, CACHE_DISK = "none", "memory", "disk"
INPUT_CACHES = (CACHE_NONE, CACHE_MEMORY, CACHE_DISK)

# Cell values that mean "missing" in CSV sources (Arrow's own list; data.na_values replaces it).
NA_VALUES = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "N/A", "NA",
             "NULL", "NaN", "n/a", "nan", "null")

# The images' environment: the tag an image was built as (its build sets it), and its digest
# where the runtime that starts the task passes it. A pushed version's lineage records both.
IMAGE_TAG_ENV = "GPUPIPE_IMAGE_TAG"
IMAGE_DIGEST_ENV = "GPUPIPE_IMAGE_DIGEST"
