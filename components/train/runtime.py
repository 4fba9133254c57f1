"""Where training runs: the tf.distribute strategy (the cluster TF_CONFIG describes, the
GPUs of this node, or one device), which process is the chief, and the precision policy the
GPU allows."""
from __future__ import annotations

import json
import os
from typing import Optional

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf


def cluster_workers(tf_config: Optional[str]) -> int:
    """How many workers (chief included) TF_CONFIG names; 1 when unset."""
    if not tf_config:
        return 1
    cluster = json.loads(tf_config).get("cluster", {})
    return max(1, len(cluster.get("chief", [])) + len(cluster.get("worker", [])))


def is_chief(tf_config: Optional[str]) -> bool:
    """The chief (or the only process) writes the model; other workers write to scratch."""
    if not tf_config:
        return True
    cfg = json.loads(tf_config)
    task = cfg.get("task", {})
    if "chief" in cfg.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type", "worker") == "worker" and task.get("index", 0) == 0


def choose_strategy(name: str = "auto"):
    """`auto`: MultiWorkerMirroredStrategy when TF_CONFIG names several workers,
    MirroredStrategy over the GPUs of one node, else TensorFlow's default strategy on the
    one device (GPU when present). BackupAndRestore supports all three (not
    OneDeviceStrategy), and on one CPU the default strategy measured 12% faster than a
    one-device MirroredStrategy with streaming input (bench/train.py)."""
    workers = cluster_workers(os.environ.get("TF_CONFIG"))
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialised in this process
            pass
    if name == "multi_worker" or (name == "auto" and workers > 1):
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored" or (name == "auto" and len(gpus) > 1):
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def compute_capability() -> Optional[tuple]:
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        if details.get("compute_capability"):
            return tuple(details["compute_capability"])
    return None


def precision_policy(setting: str, capability: Optional[tuple]) -> str:
    """The Keras dtype policy: float16 on compute capability 7.x, bfloat16 allowed on 8.x
    and later (`auto` picks bfloat16 there), float32 on CPU or when `off`."""
    if setting == "off" or capability is None:
        return "float32"
    if setting == "float16":
        return "mixed_float16"
    if setting == "bfloat16":
        if capability[0] < 8:
            raise ValueError(f"training.mixed_precision: bfloat16 needs compute capability 8.0+, this GPU has "
                             f"{capability[0]}.{capability[1]}; use float16 or auto")
        return "mixed_bfloat16"
    return "mixed_bfloat16" if capability[0] >= 8 else "mixed_float16" if capability[0] >= 7 else "float32"
