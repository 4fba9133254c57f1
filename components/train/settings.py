"""Train's settings: the config's `training:` section (how to train, and the shape of the
pods that train)."""
from __future__ import annotations

import re
from typing import Dict, List, Literal, Optional, Tuple

from pydantic import Field, field_validator, model_validator

from components.contracts.pods import Toleration, check_labels
from components.contracts.settings import Strict
from components.train.tune_settings import TuneSettings
from components.train.vision_settings import VisionSettings


SPOT_CHECKPOINT_STEPS = 50
SPOT_RETRIES = 5


class EarlyStopping(Strict):
    """Stop when the monitored metric has not improved for `patience` epochs, and keep the
    weights of the best epoch (tf_keras' EarlyStopping, restore_best_weights). The metric is
    measured on the validation slice of the train split (training.validation_percent), or on
    the training batches when that slice is 0 or too small."""

    metric: Literal["loss", "accuracy", "rmse"] = Field(
        "loss", description="a metric the trainer reports per epoch, on the validation slice when there is one "
                            "(val_loss, ...); rmse is in the label's units")
    patience: int = Field(10, ge=1, description="epochs without an improvement of at least min_delta")
    min_delta: float = Field(0.0, ge=0)


# The validation slice needs at least this many rows to steer early stopping; fewer: the
# training batches' metric is monitored instead.
MIN_VALIDATION_ROWS = 30


class LearningRateSchedule(Strict):
    """A linear warmup from 0 to the learning rate over `warmup_steps`, then `decay`: none,
    cosine (to alpha x the rate over the remaining steps of training) or step (x factor
    every `every_steps`)."""

    warmup_steps: int = Field(0, ge=0)
    decay: Literal["none", "cosine", "step"] = "cosine"
    alpha: float = Field(0.0, ge=0, le=1, description="cosine: the final rate as a fraction of the initial one")
    every_steps: int = Field(1000, ge=1, description="step: steps between two decays")
    factor: float = Field(0.5, gt=0, le=1, description="step: the rate is multiplied by this at each decay")


# Keys that were once training.cpu / training.memory: the training pods' CPU and memory have
# one home, cluster.resources.train, like every other step's.
MOVED_TO_CLUSTER_RESOURCES = ("cpu", "memory")


class TrainingPods(Strict):
    """The pods that train on the cluster (pipelines/pods.py turns these into a PodShape): how
    they are launched, how many, their GPUs and placement, and how often they restart. Their
    CPU and memory are cluster.resources.train's, like every step's."""

    retries: int = Field(2, ge=0, description="restarts after a preemption or a lost node (exit 143): the "
                                              "JobSet's or TFJob's restart budget; with launcher: pod, KFP retries "
                                              "of the train task")
    retry_backoff: str = Field("60s", pattern=r"^\d+(s|m|h)$")
    accelerator: Optional[str] = Field(
        None, description="Kubernetes GPU resource name requested by the train task, e.g. nvidia.com/gpu")
    gpus: int = Field(0, ge=0, description="GPUs per worker (a limit)")
    workers: int = Field(1, ge=1, description="> 1: the train task launches a multi-worker job with this many "
                                              "workers (MultiWorkerMirroredStrategy)")
    launcher: Literal["jobset", "tfjob", "pod"] = Field(
        "jobset", description="how GPU training runs on the cluster: a JobSet (jobset.x-k8s.io, 1 to N workers) or a "
                              "Kubeflow TFJob (needs the training-operator) that a small CPU train task launches and "
                              "follows, Kueue admitting the job as one workload and its failurePolicy restarting it "
                              "(training.pods.retries times) from the backup; or, on clusters without either, pod: one "
                              "worker in the train task's own pod, where only KFP's retry restarts it, within an hour "
                              "of the first attempt's start (kfp 2.13's retry backoff cap, counted by Argo)")
    node_selector: Dict[str, str] = Field(default_factory=dict)
    tolerations: List[Toleration] = Field(default_factory=list)
    job_namespace: Optional[str] = Field(None, description="namespace of the multi-worker job (default: the train "
                                                           "task's own)")

    spot: bool = Field(False, description="train on the spot pool (cluster.spot_node_selector and spot_tolerations): "
                                          "checkpoint_steps at most 50 and retries at least 5, since spot nodes go "
                                          "away with short notice")

    @model_validator(mode="before")
    @classmethod
    def _spot_retries_more(cls, data):
        if isinstance(data, dict) and data.get("spot"):
            retries = data.get("retries", cls.model_fields["retries"].default)
            data = {**data, "retries": max(retries, SPOT_RETRIES)}
        return data

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, v: Dict[str, str]) -> Dict[str, str]:
        return check_labels(v, "training.pods.node_selector")

    @model_validator(mode="after")
    def _gpus_need_accelerator(self) -> "TrainingPods":
        if self.gpus and not self.accelerator:
            raise ValueError("gpus is set but accelerator is not; add accelerator: nvidia.com/gpu")
        if self.accelerator and not self.gpus:
            raise ValueError("accelerator is set but gpus is 0; set gpus: 1 or more")
        return self


class TrainSettings(Strict):
    task: Literal["multiclass", "binary", "regression"] = "multiclass"
    model: str = Field(
        "dnn", description="a registered model family: dnn; wide_deep (a linear part on the categorical features "
                           "beside the DNN); cross (a DCN-v2 cross network beside the DNN); for image features: "
                           "cnn (small, from scratch), resnet50, efficientnetb0, mobilenetv3, vit (training.image)")
    custom_model: Optional[str] = Field(
        None, description="module:function building your own tf_keras model from the feature specs "
                          "(see components/train/model.py: build_model); overrides `model`")
    image: VisionSettings = Field(
        default_factory=VisionSettings, description="the image families' weights file, fine-tuning and sizes "
                                                    "(components/train/vision.py)")
    hidden_units: List[int] = Field(default_factory=lambda: [64, 32])
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout rate after each layer of the tower (0: none)")
    embedding_dim: int = Field(8, ge=1)
    max_vocabulary: int = Field(
        1000, ge=1, le=1000, description="categorical features with at most this many distinct values get a "
                                         "vocabulary (top values from the statistics); larger ones are hashed")
    hash_buckets: int = Field(1000, ge=2, description="hash buckets for high-cardinality categorical features")
    cross_layers: int = Field(2, ge=1, description="cross layers of the `cross` model")
    epochs: int = Field(
        100, ge=1, description="the most epochs training runs; with early_stopping (the default) a cap, training "
                               "usually stops earlier, when the validation slice stops improving")
    batch_size: int = Field(64, ge=1, description="per-replica batch size; global = this x replicas")
    learning_rate: float = Field(1e-3, gt=0)
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="k > 1: the optimizer applies the mean gradient of k consecutive batches once, an "
                             "effective batch of k x the global batch (epochs are rounded up to whole k-step "
                             "windows; lr_schedule steps and optimizer_steps count applied updates)")
    optimizer: Literal["adam", "adagrad", "ftrl", "sgd"] = Field(
        "adam", description="adagrad/ftrl update only the embedding rows a batch touches; Adam's moments make "
                            "every step touch every row (slower on the click-through model: docs/benchmarks.md, "
                            "Training input)")
    scale_learning_rate: bool = Field(False, description="multiply the learning rate by the number of replicas")
    shuffle_buffer: int = Field(10_000, ge=1)
    cache_budget_mb: int = Field(
        1024, ge=0, description="cache parsed batches in memory when the train split fits this budget (0: never)")
    disk_cache_budget_mb: int = Field(
        20480, ge=0, description="otherwise write the parsed batches to local scratch in the first epoch and read "
                                 "them from there in later epochs when they fit this budget (0: never); on the "
                                 "cluster the train pod gets an emptyDir of this size")
    scratch_dir: Optional[str] = Field(
        None, description="local directory for the disk cache (default: the emptyDir on the cluster, the system "
                          "temp directory locally)")
    strategy: Literal["auto", "one_device", "mirrored", "multi_worker"] = "auto"
    mixed_precision: Literal["auto", "off", "float16", "bfloat16"] = Field(
        "auto", description="auto: float16 on compute capability 7.x, bfloat16 on 8.x and later; off on CPU")
    xla: bool = Field(False, description="compile the train step with XLA (jit_compile)")
    checkpoint_steps: int = Field(
        200, ge=1, description="BackupAndRestore every N steps; a retried or preempted run resumes from there")
    gpu_hour_price: float = Field(0.0, ge=0, description="price of one GPU-hour, for the cost in the training report")
    seed: int = 42
    early_stopping: Optional[EarlyStopping] = Field(
        default_factory=EarlyStopping,
        description="on by default: stop when the validation slice's loss has not improved for `patience` epochs "
                    "and keep the best epoch's weights; null: train every epoch")
    validation_percent: int = Field(
        10, ge=0, le=50, description="this share of the train split (a hash of each serialized example, so the "
                                     "same rows every epoch and on every worker; never the eval split) is held out "
                                     "of training to steer early_stopping; 0: train on every row and monitor the "
                                     "training batches")
    target_transform: Literal["auto", "standardize", "log"] = Field(
        "auto", description="regression: the network learns the target standardised (train mean and deviation), "
                            "or log(1 + y) standardised; auto: log when the label is never negative and skewed "
                            "(train statistics: 3 (mean - median) / std >= 0.5). The serving signatures return the "
                            "label's own units either way, and the reported rmse is in them")
    linear_start: bool = Field(
        True, description="the built-in families contain the linear model (LogisticRegression or Ridge fitted on "
                          "the train rows before training, as evaluate's baseline) and start from it, the network "
                          "a residual beside it starting at zero; early stopping also scores the starting weights "
                          "and the best are kept. Ignored with custom_model")
    linear_start_process_rows: int = Field(
        10_000, ge=0, description="a classifier's linear start is fitted in a process of its own, beside the train "
                                  "task's TensorFlow import, when ingest's train sample holds at least this many "
                                  "rows (0: always); below it the fit takes less than the process's own start "
                                  "(Python and scikit-learn's import: 1.6 CPU-s on penguins)")
    lr_schedule: Optional[LearningRateSchedule] = Field(None, description="unset: a constant learning rate")
    profile_steps: Optional[Tuple[int, int]] = Field(
        None, description="[first, last] step of one epoch to profile into the TensorBoard logs (Profile tab)")
    tune: Optional[TuneSettings] = Field(
        None, description="a hyperparameter search over learning rate, width and depth, dropout and batch size "
                          "(Keras Tuner's oracles): the best trial's model is the step's (docs/tuning.md); "
                          "unset: train once with the settings above")
    pods: TrainingPods = Field(
        default_factory=TrainingPods,
        description="the pods that train on the cluster: launcher, workers, GPUs, placement, spot, restarts "
                    "(their CPU and memory: cluster.resources.train)")

    @model_validator(mode="before")
    @classmethod
    def _pod_keys_live_under_pods(cls, data):
        if isinstance(data, dict):
            for key in data:
                if key in MOVED_TO_CLUSTER_RESOURCES:
                    raise ValueError(f"training.{key} is not a key; the training pods' {key} is "
                                     f"cluster.resources.train.{key} (request; {key}_limit for the limit)")
                if key in TrainingPods.model_fields:
                    raise ValueError(f"training.{key} is not a key; write it as training.pods.{key}")
        return data

    @model_validator(mode="before")
    @classmethod
    def _spot_checkpoints_often(cls, data):
        pods = data.get("pods") if isinstance(data, dict) else None
        spot = pods.spot if isinstance(pods, TrainingPods) else isinstance(pods, dict) and pods.get("spot")
        if spot:
            steps = data.get("checkpoint_steps", cls.model_fields["checkpoint_steps"].default)
            data = {**data, "checkpoint_steps": min(steps, SPOT_CHECKPOINT_STEPS)}
        return data

    @model_validator(mode="after")
    def _tuning_compares_on_the_validation_slice(self) -> "TrainSettings":
        if self.tune is not None and (self.early_stopping is None or self.validation_percent <= 0):
            raise ValueError("tune: trials are compared on the validation slice's early-stopping metric; keep "
                             "early_stopping (on by default) and set validation_percent above 0")
        return self

    @field_validator("hidden_units")
    @classmethod
    def _positive_units(cls, v: List[int]) -> List[int]:
        if not v or any(u < 1 for u in v):
            raise ValueError("give one or more positive layer widths, e.g. [64, 32]")
        return v

    @field_validator("custom_model")
    @classmethod
    def _module_function(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", v):
            raise ValueError(f"'{v}' is not module:function, e.g. my_models.wide:build")
        return v


def validation_slice(settings: TrainSettings, train_rows: int) -> int:
    """The percent of the train split held out for early stopping: 0 without early stopping
    or when the slice would have fewer than MIN_VALIDATION_ROWS rows."""
    p = settings.validation_percent
    if not settings.early_stopping or p <= 0 or train_rows * p / 100 < MIN_VALIDATION_ROWS:
        return 0
    return p
