"""The pure pipeline factory: a validated config in, a KFP `@dsl.pipeline` out.

Each step gets its settings as one JSON parameter, the config section as it is (the
section is the step's own settings model), and the table's columns; run-time knobs (data
location, epochs, learning rate, threshold, serving base) are pipeline parameters whose
defaults come from the config, so a Kubeflow UI user changes them per run without
recompiling. Every task takes its pod shape from pipelines/pods.py. Nothing here reads
files, the environment or the network.
"""

from kfp import dsl, kubernetes

from components.contracts import names
from components.contracts.compat import kfp_setters_without_source
from components.contracts.errors import GpupipeError
from components.contracts.pods import PodShape
from components.contracts.settings import Columns
from components.evaluate.component import make_evaluate_op
from components.fingerprint.component import make_fingerprint_op
from components.ingest.component import make_ingest_op
from components.notify.component import make_notify_op
from components.notify.settings import WEBHOOK_SECRET_KEY, WEBHOOK_URL_ENV
from components.push.component import make_push_op
from components.report.component import make_report_op
from components.train.component import make_train_op
from components.train.launch import POD_NAME_ENV, POD_UID_ENV, WORKFLOW_ENV, WORKFLOW_LABEL, Launch
from components.validate.component import make_validate_op
from pipelines import pods
from pipelines.config import PipelineConfig



# Pipeline parameter names: the fields of the Kubeflow run form, and what local runs override.
P_DATA_SOURCE = "data_source"
P_EPOCHS = "epochs"
P_THRESHOLD = "eval_threshold"
P_SERVING_BASE = "serving_base"
P_LEARNING_RATE = "learning_rate"


REMOTE = ("gs://", "s3://")  # where every pod can read and write (the storage layer's schemes)
PIPELINE_ROOTS = ("gs://", "s3://", "minio://")  # what KFP's launcher stores artifacts in
URI_FIX = "gs://BUCKET/PATH or s3://BUCKET/PATH"


def _cluster_uri(value: str, key: str, fix: str) -> str:
    if value.startswith("minio://"):
        raise GpupipeError(f"{key}: '{value}': minio:// is KFP's name for its artifact store only; write the same "
                           f"objects as s3://{value[len('minio://'):]} (set storage.s3.endpoint to the MinIO URL)")
    if not value.startswith(REMOTE) and not value.startswith("synthetic:"):
        raise GpupipeError(f"{key}: '{value}' is a path inside the pod, lost with it on the cluster; {fix}")
    return value


def cluster_locations(config: PipelineConfig) -> dict:
    """The data source and serving base a compiled pipeline runs with when nobody types
    them in: the cluster section's URIs (else the local ones, which must then be URIs).
    Raises GpupipeError, naming the key, for any location a pod would read or write that
    does not outlive the pod."""
    cluster = config.cluster
    locations = {
        P_DATA_SOURCE: _cluster_uri(cluster.data_source or config.data.source,
                                    "cluster.data_source" if cluster.data_source else "data.source",
                                    f"set cluster.data_source: {URI_FIX}"),
        P_SERVING_BASE: _cluster_uri(cluster.serving_base or config.serving.base,
                                     "cluster.serving_base" if cluster.serving_base else "serving.base",
                                     f"set cluster.serving_base: {URI_FIX}"),
    }
    for key, value in (("validation.schema_file", config.validation.schema_file),
                       ("validation.drift.baseline_statistics", config.validation.drift.baseline_statistics)):
        if value:
            _cluster_uri(value, key, f"upload the file and set {key}: {URI_FIX}")
    if config.pipeline_root and not config.pipeline_root.startswith(PIPELINE_ROOTS):
        raise GpupipeError(f"pipeline_root: '{config.pipeline_root}' is not an object-store URI; give "
                           "gs://BUCKET/PATH (or s3://, minio://), or remove it for the installation's default")
    return locations


def run_parameters(config: PipelineConfig, local: bool = True) -> dict:
    """The pipeline's parameters with their defaults: the config's local locations for a
    local run, its cluster locations for the compiled pipeline."""
    params = {
        P_DATA_SOURCE: config.data.source,
        P_EPOCHS: config.training.epochs,
        P_THRESHOLD: config.evaluation.threshold,
        P_SERVING_BASE: config.serving.base,
        P_LEARNING_RATE: config.training.learning_rate,
    }
    return params if local else {**params, **cluster_locations(config)}


def apply_pod_shape(task: dsl.PipelineTask, shape: PodShape) -> None:
    """The shape onto a KFP task through kfp-kubernetes (secrets by name, never values)."""
    task.set_cpu_request(shape.cpu_request).set_cpu_limit(shape.cpu_limit)
    task.set_memory_request(shape.memory_request).set_memory_limit(shape.memory_limit)
    if shape.gpus:
        task.set_accelerator_type(shape.accelerator).set_accelerator_limit(shape.gpus)
    for key, value in sorted(shape.node_selector.items()):
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for tol in shape.tolerations:
        kubernetes.add_toleration(task, key=tol.key, operator=tol.operator, value=tol.value, effect=tol.effect)
    for name, value in sorted(shape.env.items()):
        task.set_env_variable(name, value)
    by_secret: dict = {}
    for name, ref in sorted(shape.secret_env.items()):
        by_secret.setdefault(ref.secret, {})[ref.key] = name
    for secret, key_to_env in sorted(by_secret.items()):
        kubernetes.use_secret_as_env(task, secret_name=secret, secret_key_to_env=key_to_env)
    for sv in shape.secret_volumes:
        kubernetes.use_secret_as_volume(task, secret_name=sv.secret, mount_path=sv.mount_path)
    for ed in shape.empty_dirs:
        kubernetes.empty_dir_mount(task, volume_name=ed.name, mount_path=ed.mount_path, size_limit=ed.size_limit)
    if shape.image_pull_secrets:
        kubernetes.set_image_pull_secrets(task, list(shape.image_pull_secrets))
    for key, value in sorted(shape.labels.items()):
        kubernetes.add_pod_label(task, label_key=key, label_value=value)
    kubernetes.set_timeout(task, shape.timeout_seconds)


# On the job: which pipeline it trains for (`gpupipe queue` tells runs apart by it where Kueue's
# labelKeysToCopy copies it onto the Workload).
PIPELINE_LABEL = "gpupipe/pipeline"


def launched(config: PipelineConfig) -> bool:
    """Whether the train task launches a job for the workers (GPU training on 1 to N workers,
    unless training.pods.launcher is pod) instead of training in its own pod."""
    t = config.training.pods
    return t.workers > 1 or (t.gpus > 0 and t.launcher != "pod")


def launch_json(config: PipelineConfig) -> str:
    """The job the train task launches (a JobSet or TFJob of training.pods.workers GPU workers);
    "" when the task trains in its own pod (CPU training, or launcher: pod)."""
    t = config.training.pods
    if not launched(config):
        return ""
    return Launch(kind=t.launcher, image=config.train_image, workers=t.workers, namespace=t.job_namespace or "",
                  shape=pods.training_shape(config, queued=False), max_restarts=t.retries,
                  labels={**pods.queue_labels(config), PIPELINE_LABEL: config.name}).model_dump_json()


def push_lineage(config: PipelineConfig) -> str:
    """What each pushed version records of the pipeline that made it (JSON): the pipeline,
    gpupipe's version, the image the tasks run in and a digest of the whole config."""
    import hashlib
    import json

    from pipelines.version import __version__

    return json.dumps({"pipeline": config.name, "gpupipe_version": __version__, "image": config.images.cpu_image,
                       "config_digest": hashlib.sha256(config.model_dump_json().encode()).hexdigest()},
                      sort_keys=True)


def create_pipeline(config: PipelineConfig, local: bool = False):
    """Returns the `@dsl.pipeline` function for `config`: for the cluster (compile it; its
    defaults are the cluster locations) or, `local`, for kfp.local."""
    defaults = run_parameters(config, local=local)

    with kfp_setters_without_source():  # @dsl.pipeline runs the body here, where the tasks' setters are called
        return _pipeline(config, local, defaults)


def _pipeline(config: PipelineConfig, local: bool, defaults: dict):
    @dsl.pipeline(name=config.name, description=config.description or f"gpupipe pipeline {config.name}",
                  pipeline_root=None if local else config.pipeline_root)
    def pipeline(
        data_source: str = defaults[P_DATA_SOURCE],
        epochs: int = defaults[P_EPOCHS],
        eval_threshold: float = defaults[P_THRESHOLD],
        serving_base: str = defaults[P_SERVING_BASE],
        learning_rate: float = defaults[P_LEARNING_RATE],
    ):
        with exit_handler(config, local, serving_base):
            _steps(config, local, data_source, epochs, eval_threshold, serving_base, learning_rate)

    return pipeline


def exit_handler(config: PipelineConfig, local: bool, serving_base):
    """With notify.webhook_secret, on the cluster: the steps run inside a dsl.ExitHandler whose
    exit task (components/notify) reports the run's final status (kfp.local has no exit
    handlers: `gpupipe run` notifies from its summary)."""
    import contextlib

    if local or not config.notify.webhook_secret:
        return contextlib.nullcontext()
    notify_task = make_notify_op(config.images.cpu_image)(
        settings=config.notify.for_cluster().model_dump_json(), pipeline=config.name,
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, serving_base=serving_base, model_name=config.serving.model_name)
    notify_task.set_display_name("Notify").set_caching_options(False)
    kubernetes.use_secret_as_env(notify_task, secret_name=config.notify.webhook_secret,
                                 secret_key_to_env={WEBHOOK_SECRET_KEY: WEBHOOK_URL_ENV})
    apply_pod_shape(notify_task, pods.step_shape(config, names.NOTIFY))
    return dsl.ExitHandler(notify_task, name="gpupipe-run")


def _steps(config: PipelineConfig, local: bool, data_source, epochs, eval_threshold, serving_base, learning_rate):
    """The run's tasks, wired; the pipeline's parameters as KFP passes them in. A local run
    trains in its train task (no JobSet on one machine)."""
    cpu_image = config.images.cpu_image
    fingerprint_op = make_fingerprint_op(cpu_image)
    ingest_op = make_ingest_op(cpu_image)
    validate_op = make_validate_op(cpu_image)
    launch = "" if local else launch_json(config)
    train_op = make_train_op(cpu_image if launch else config.train_image)  # a launcher holds no GPU
    evaluate_op = make_evaluate_op(cpu_image)
    push_op = make_push_op(cpu_image)
    report_op = make_report_op(cpu_image)
    data, training, serving = config.data, config.training, config.serving
    columns = Columns.part_of(data).model_dump_json()
    # Never cached: its outputs put the data's and the served model's state into the
    # cache keys of ingest and validate, so those are reused only when neither changed.
    fingerprint_task = fingerprint_op(source=data_source, data_format=data.format, serving_base=serving_base,
                                      model_name=serving.model_name)
    fingerprint_task.set_display_name("Fingerprint inputs").set_caching_options(False)

    ingest_task = ingest_op(source=data_source, settings=data.model_dump_json(),
                            numeric_label=training.task == "regression",
                            source_fingerprint=fingerprint_task.outputs["data"])
    ingest_task.set_display_name("Ingest data").set_caching_options(True)

    validate_task = validate_op(
        examples=ingest_task.outputs["examples"], columns=columns, settings=config.validation.model_dump_json(),
        serving_base=serving_base, model_name=serving.model_name,
        served_version=fingerprint_task.outputs["served"])
    validate_task.set_display_name("Validate data (TFDV)").set_caching_options(True)

    # Cached: the key is the examples (ingest's, cached by the data's fingerprint), the settings,
    # the run parameters and the image (its tag carries the commit). It runs after validate,
    # which stops the run on bad data, but takes nothing from it.
    train_task = train_op(
        examples=ingest_task.outputs["examples"], columns=columns, settings=training.model_dump_json(),
        launch=launch, export=serving.export, epochs=epochs, learning_rate=learning_rate).after(validate_task)
    train_task.set_display_name("Train model").set_caching_options(True)
    train_task.set_retry(num_retries=training.pods.retries, backoff_duration=training.pods.retry_backoff,
                         backoff_factor=2.0)
    if launch:  # the workers hold the GPUs and the scratch; this task creates and follows their job
        kubernetes.use_field_path_as_env(train_task, env_name=POD_NAME_ENV, field_path="metadata.name")
        kubernetes.use_field_path_as_env(train_task, env_name=POD_UID_ENV, field_path="metadata.uid")
        kubernetes.use_field_path_as_env(train_task, env_name=WORKFLOW_ENV,
                                         field_path=f"metadata.labels['{WORKFLOW_LABEL}']")

    evaluate_task = evaluate_op(
        model=train_task.outputs["model"], examples=ingest_task.outputs["examples"],
        settings=config.evaluation.model_dump_json(), threshold=eval_threshold, serving_base=serving_base,
        model_name=serving.model_name, served_version=fingerprint_task.outputs["served"])
    # Cached while the model, the examples, the settings and the served version are unchanged.
    evaluate_task.set_display_name("Evaluate model").set_caching_options(True)

    push_task = push_op(
        model=train_task.outputs["model"], blessing=evaluate_task.outputs["blessing"],
        examples=ingest_task.outputs["examples"], statistics=validate_task.outputs["statistics"],
        schema=validate_task.outputs["schema"], settings=serving.model_dump_json(), serving_base=serving_base,
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        lineage=push_lineage(config), data_fingerprint=fingerprint_task.outputs["data"])
    push_task.set_display_name("Push to serving").set_caching_options(False)

    # Reads what the others recorded; the page is the task's HTML output in the Kubeflow UI.
    report_task = report_op(
        train_report=train_task.outputs["report"], blessing=evaluate_task.outputs["blessing"],
        anomalies=validate_task.outputs["anomalies"], pushed=push_task.outputs["pushed"], pipeline=config.name,
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    report_task.set_display_name("Run report").set_caching_options(False)

    shapes = {names.FINGERPRINT: fingerprint_task, names.INGEST: ingest_task, names.VALIDATE: validate_task,
              names.EVALUATE: evaluate_task, names.PUSH: push_task, names.REPORT: report_task}
    for step, task in shapes.items():
        apply_pod_shape(task, pods.step_shape(config, step))
    apply_pod_shape(train_task, pods.launcher_shape(config) if launch else pods.training_shape(config))


def create_scoring_pipeline(config: PipelineConfig):
    """The scoring pipeline (`gpupipe compile --scoring`): one task that scores the data with
    the served version (components/predict), scheduled like any pipeline. Its parameters: the
    data, the serving base, the output (.csv or .jsonl) and the version (stable or N)."""
    import json

    from components.predict.component import make_predict_op

    defaults = cluster_locations(config)
    predict_op = make_predict_op(config.images.cpu_image)
    data = config.data

    with kfp_setters_without_source():  # the body runs at decoration: the task's setters
        @dsl.pipeline(name=f"{config.name}-scoring", pipeline_root=config.pipeline_root,
                      description=f"gpupipe scoring with the served {config.serving.model_name}")
        def scoring(data_source: str = defaults[P_DATA_SOURCE], serving_base: str = defaults[P_SERVING_BASE],
                    output: str = f"{defaults[P_SERVING_BASE]}/predictions/{config.serving.model_name}.jsonl",
                    version: str = "stable"):
            task = predict_op(source=data_source, data_format=data.format, columns=Columns.part_of(data).model_dump_json(),
                              serving_base=serving_base, model_name=config.serving.model_name, output=output,
                              version=version, key=data.split.key or "", na_values=json.dumps(list(data.na_values)),
                              engine="beam" if data.engine == "beam" else "local",
                              beam_pipeline_args=json.dumps(list(data.beam_pipeline_args)))
            task.set_display_name("Score with the served model").set_caching_options(False)
            apply_pod_shape(task, pods.step_shape(config, names.EVALUATE))  # the resources that score the eval split
    return scoring
