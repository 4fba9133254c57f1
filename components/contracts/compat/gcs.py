"""google-cloud-storage 2.19.0's private names (components/contracts/compat/__init__.py,
MEASURED_ON).

`should_retry`: `google.cloud.storage.retry._should_retry(exc)`, the predicate the library's
own DEFAULT_RETRY uses (429, 5xx, connection errors and the transport's timeouts). The
storage layer (components/contracts/storage/gcs.py) wraps it in a Retry of its own bounds and
count, so that it can count and report each retried fault; the library offers the predicate
only inside DEFAULT_RETRY."""


def should_retry(err: BaseException) -> bool:
    from google.cloud.storage.retry import _should_retry  # pylint: disable=protected-access

    return _should_retry(err)
