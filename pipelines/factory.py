"""The pure pipeline factory: a validated config in, a KFP `@dsl.pipeline` out.

Run-time knobs (data location, epochs, threshold, serving base) are pipeline parameters
whose defaults come from the config, so a Kubeflow UI user changes them per run
without recompiling. Nothing here reads files, the environment or the network.
"""

import json

from kfp import dsl, kubernetes

from components import names
from components.evaluate.component import make_evaluate_op
from components.fingerprint.component import make_fingerprint_op
from components.ingest.component import make_ingest_op
from components.push.component import make_push_op
from components.train.component import make_train_op
from components.validate.component import make_validate_op
from pipelines.config import PipelineConfig

# Pipeline parameter names: the fields of the Kubeflow run form, and what local runs override.
P_DATA_SOURCE = "data_source"
P_EPOCHS = "epochs"
P_THRESHOLD = "eval_threshold"
P_SERVING_BASE = "serving_base"
P_LEARNING_RATE = "learning_rate"
GCS_KEY_MOUNT = "/var/secrets/gcs"


def run_parameters(config: PipelineConfig) -> dict:
    """The pipeline's parameters with their config defaults."""
    return {
        P_DATA_SOURCE: config.data.source,
        P_EPOCHS: config.training.epochs,
        P_THRESHOLD: config.evaluation.threshold,
        P_SERVING_BASE: config.serving.base,
        P_LEARNING_RATE: config.training.learning_rate,
    }


def _request_accelerators(task: dsl.PipelineTask, config: PipelineConfig) -> None:
    t = config.training
    if t.gpus:
        task.set_accelerator_type(t.accelerator).set_accelerator_limit(t.gpus)
    if t.cpu:
        task.set_cpu_limit(t.cpu)
    if t.memory:
        task.set_memory_limit(t.memory)
    for key, value in sorted(t.node_selector.items()):
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for tol in t.tolerations:
        kubernetes.add_toleration(task, key=tol.key, operator=tol.operator, value=tol.value, effect=tol.effect)


def _mount_scratch(task: dsl.PipelineTask, config: PipelineConfig) -> None:
    """Node-local scratch for the trainer's disk input cache: an emptyDir of the budget's size."""
    budget = config.training.disk_cache_budget_mb
    if budget:
        kubernetes.empty_dir_mount(task, volume_name=names.SCRATCH_VOLUME, mount_path=names.SCRATCH_MOUNT,
                                   size_limit=f"{budget}Mi")
        task.set_env_variable(names.SCRATCH_ENV, names.SCRATCH_MOUNT)


def train_settings_json(config: PipelineConfig) -> str:
    """The trainer's settings (components.train.logic.TrainSettings) from the config, as JSON."""
    t, d = config.training, config.data
    settings = {
        "label": d.label, "numeric_features": list(d.numeric_features),
        "categorical_features": list(d.categorical_features), "task": t.task, "model": t.model,
        "custom_model": t.custom_model or "", "hidden_units": list(t.hidden_units), "embedding_dim": t.embedding_dim,
        "max_vocabulary": t.max_vocabulary, "hash_buckets": t.hash_buckets, "cross_layers": t.cross_layers,
        "epochs": t.epochs, "batch_size": t.batch_size, "learning_rate": t.learning_rate, "optimizer": t.optimizer,
        "scale_learning_rate": t.scale_learning_rate, "shuffle_buffer": t.shuffle_buffer,
        "cache_budget_mb": t.cache_budget_mb, "disk_cache_budget_mb": t.disk_cache_budget_mb,
        "scratch_dir": t.scratch_dir or "", "strategy": t.strategy, "mixed_precision": t.mixed_precision,
        "xla": t.xla, "checkpoint_steps": t.checkpoint_steps, "gpu_hour_price": t.gpu_hour_price, "seed": t.seed,
    }
    return json.dumps(settings, sort_keys=True)


def validation_settings_json(config: PipelineConfig) -> str:
    """The validator's settings (components.validate.logic.ValidationSettings) as JSON."""
    v = config.validation
    return json.dumps({
        "fail_on_anomalies": v.fail_on_anomalies, "warn_only": list(v.warn_only), "schema_path": v.schema_file or "",
        "skew_threshold": v.skew_threshold, "engine": v.statistics_engine,
        "beam_pipeline_args": list(v.beam_pipeline_args), "drift": v.drift.model_dump(exclude_none=True),
    }, sort_keys=True)


def tfjob_json(config: PipelineConfig) -> str:
    """For training.workers > 1: what the train task needs to build the TFJob; "" otherwise."""
    t = config.training
    if t.workers == 1:
        return ""
    spec = {
        "image": config.train_image, "workers": t.workers, "gpus": t.gpus, "accelerator": t.accelerator or "",
        "node_selector": dict(t.node_selector), "tolerations": [tol.model_dump(exclude_none=True) for tol in t.tolerations],
        "cpu": t.cpu, "memory": t.memory, "namespace": t.tfjob_namespace or "",
        "scratch_mb": t.disk_cache_budget_mb,
    }
    if config.cluster.gcs_credentials_secret:
        spec["env"] = {"GOOGLE_APPLICATION_CREDENTIALS": f"{GCS_KEY_MOUNT}/{config.cluster.gcs_credentials_key}"}
        spec["secret_volume"] = {"secret": config.cluster.gcs_credentials_secret, "mount": GCS_KEY_MOUNT}
    return json.dumps(spec, sort_keys=True)


def _use_cluster_secrets(task: dsl.PipelineTask, config: PipelineConfig) -> None:
    """Secrets by reference (kfp-kubernetes): a mounted service-account key for GCS and
    image pull secrets. The compiled YAML holds names, never values."""
    cluster = config.cluster
    if cluster.gcs_credentials_secret:
        kubernetes.use_secret_as_volume(task, secret_name=cluster.gcs_credentials_secret, mount_path=GCS_KEY_MOUNT)
        task.set_env_variable("GOOGLE_APPLICATION_CREDENTIALS", f"{GCS_KEY_MOUNT}/{cluster.gcs_credentials_key}")
    if cluster.image_pull_secrets:
        kubernetes.set_image_pull_secrets(task, list(cluster.image_pull_secrets))


def _thresholds_json(config: PipelineConfig) -> str:
    """Every threshold but the primary value bound (a run-time parameter), as JSON."""
    rules = {name: rule.model_dump(exclude_none=True) for name, rule in config.evaluation.thresholds.items()}
    if config.evaluation.change_threshold is not None:
        rules.setdefault(config.evaluation.metric, {})["change"] = config.evaluation.change_threshold.model_dump(
            exclude_none=True)
    return json.dumps(rules, sort_keys=True)


def create_pipeline(config: PipelineConfig):
    """Returns the `@dsl.pipeline` function for `config` (compile it, or call it under kfp.local)."""
    cpu_image = config.images.cpu_image
    fingerprint_op = make_fingerprint_op(cpu_image)
    ingest_op = make_ingest_op(cpu_image)
    validate_op = make_validate_op(cpu_image)
    train_op = make_train_op(config.train_image)
    evaluate_op = make_evaluate_op(cpu_image)
    push_op = make_push_op(cpu_image)
    data, training = config.data, config.training

    @dsl.pipeline(name=config.name, description=config.description or f"gpupipe pipeline {config.name}")
    def pipeline(
        data_source: str = config.data.source,
        epochs: int = config.training.epochs,
        eval_threshold: float = config.evaluation.threshold,
        serving_base: str = config.serving.base,
        learning_rate: float = config.training.learning_rate,
    ):
        # Never cached: its outputs put the data's and the served model's state into the
        # cache keys of ingest and validate, so those are reused only when neither changed.
        fingerprint_task = fingerprint_op(source=data_source, data_format=data.format, serving_base=serving_base,
                                          model_name=config.serving.model_name)
        fingerprint_task.set_display_name("Fingerprint inputs").set_caching_options(False)

        ingest_task = ingest_op(
            source=data_source, label=data.label, numeric_features=list(data.numeric_features),
            categorical_features=list(data.categorical_features), eval_percent=data.split.eval_percent,
            split_key=data.split.key or "", numeric_label=config.training.task == "regression",
            data_format=data.format, source_fingerprint=fingerprint_task.outputs["data"])
        ingest_task.set_display_name("Ingest data").set_caching_options(True)

        validate_task = validate_op(
            examples=ingest_task.outputs["examples"], label=data.label, settings=validation_settings_json(config),
            serving_base=serving_base, model_name=config.serving.model_name,
            served_version=fingerprint_task.outputs["served"])
        validate_task.set_display_name("Validate data (TFDV)").set_caching_options(True)

        train_task = train_op(
            examples=ingest_task.outputs["examples"], statistics=validate_task.outputs["statistics"],
            settings=train_settings_json(config), tfjob=tfjob_json(config), epochs=epochs,
            learning_rate=learning_rate)
        train_task.set_display_name("Train model").set_caching_options(False)
        train_task.set_retry(num_retries=training.retries, backoff_duration=training.retry_backoff,
                             backoff_factor=2.0)
        if training.workers == 1:  # with a TFJob the workers hold the GPUs and the scratch, not this task
            _request_accelerators(train_task, config)
            _mount_scratch(train_task, config)

        evaluation = config.evaluation
        evaluate_task = evaluate_op(
            model=train_task.outputs["model"], examples=ingest_task.outputs["examples"],
            metric=evaluation.metric, threshold=eval_threshold, thresholds=_thresholds_json(config),
            slices=list(evaluation.slices), serving_base=serving_base, model_name=config.serving.model_name)
        evaluate_task.set_display_name("Evaluate model").set_caching_options(False)

        srv = config.serving
        push_task = push_op(
            model=train_task.outputs["model"], blessing=evaluate_task.outputs["blessing"],
            examples=ingest_task.outputs["examples"], statistics=validate_task.outputs["statistics"],
            schema=validate_task.outputs["schema"], serving_base=serving_base, model_name=srv.model_name,
            keep_versions=srv.keep_versions, endpoint=srv.endpoint or "", smoke_rows=srv.smoke_rows,
            smoke_timeout=srv.smoke_timeout_seconds, fail_if_not_blessed=evaluation.fail_if_not_blessed)
        push_task.set_display_name("Push to serving").set_caching_options(False)

        for task in (fingerprint_task, ingest_task, validate_task, train_task, evaluate_task, push_task):
            _use_cluster_secrets(task, config)
    return pipeline
