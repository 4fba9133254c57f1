"""The bearer token gpupipe sends to the KFP API.

$KFP_TOKEN, else the file $KFP_TOKEN_FILE names, else an in-cluster service-account token;
behind Google's IAP, an ID token for the IAP OAuth client (--iap-client-id or
$KFP_IAP_CLIENT_ID). Never from the pipeline config; None leaves kfp.Client to its kube config.
"""
from __future__ import annotations

import os
from typing import Optional

from components.contracts.errors import GpupipeError

TOKEN_ENV = "KFP_TOKEN"
TOKEN_FILE_ENV = "KFP_TOKEN_FILE"
# Inside a Kubeflow cluster: the projected token KFP gives pipeline pods, else the pod's own.
IN_CLUSTER_TOKENS = ("/var/run/secrets/kubeflow/pipelines/token", "/var/run/secrets/kubernetes.io/serviceaccount/token")
IAP_CLIENT_ID_ENV = "KFP_IAP_CLIENT_ID"


def kfp_token(in_cluster_paths=IN_CLUSTER_TOKENS) -> Optional[str]:
    """The bearer token for the KFP API: $KFP_TOKEN, else the file $KFP_TOKEN_FILE names,
    else an in-cluster service-account token; None (kfp.Client's kube config) otherwise."""
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV].strip()
    path = os.environ.get(TOKEN_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        except OSError as err:
            raise GpupipeError(f"{TOKEN_FILE_ENV}: cannot read {path} ({err.strerror}); fix the path") from None
    for candidate in in_cluster_paths:
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as f:
                return f.read().strip()
    return None


def iap_token(client_id: str) -> str:
    """A Google ID token for an IAP-protected endpoint: its OAuth client id is the audience.
    From a service-account key ($GOOGLE_APPLICATION_CREDENTIALS) or the GCP metadata
    server (GKE, Compute Engine, Cloud Run), as google-auth finds them."""
    import google.auth.exceptions
    import google.auth.transport.requests
    import google.oauth2.id_token

    where = f"--iap-client-id {client_id}"
    try:
        return google.oauth2.id_token.fetch_id_token(google.auth.transport.requests.Request(), client_id)
    except google.auth.exceptions.DefaultCredentialsError as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise GpupipeError(f"{where}: no Google credentials that give an ID token ({reason}); set "
                           "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run where the GCP "
                           "metadata server answers") from None
    except (google.auth.exceptions.RefreshError, google.auth.exceptions.TransportError, ValueError) as err:
        reason = (str(err.args[0] if err.args else "").splitlines() or [type(err).__name__])[0][:200]
        raise GpupipeError(f"{where}: Google gave no ID token for this audience ({reason}); check the client id "
                           "(the IAP OAuth client of the Kubeflow endpoint) and that the service account may use "
                           "IAP") from None


def auth_token(iap_client_id: Optional[str] = None) -> Optional[str]:
    """The bearer token for the KFP API: an IAP ID token when an IAP client id is given (or
    in $KFP_IAP_CLIENT_ID), else kfp_token()."""
    client_id = iap_client_id or os.environ.get(IAP_CLIENT_ID_ENV)
    return iap_token(client_id) if client_id else kfp_token()
