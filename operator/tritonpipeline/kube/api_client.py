"""A small, generic Kubernetes client over the official one: server-side apply, get, list, delete."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from .. import jsontext
from ..render.meta import plural
from ..runtime import metrics
from ..settings import API_VERSION, KIND

T = TypeVar("T")
JsonPatch = list[dict[str, Any]]  # RFC 6902 operations

# Failures worth trying again later: no HTTP answer at all (status 0: refused, reset, timed out), overload
# (429) or a gateway or server that is not there (502, 503, 504). Anything else (400, 403, 404, 422...)
# is the server's answer to this request and would be the same again; so is a 500 in the case that
# matters here: the apiserver answers a server-side apply it cannot type (a field the CRD lacks) with
# 500 (kubernetes/kubernetes#139253), which the reconcile must report, not retry forever.
TRANSIENT = frozenset({0, 429, 502, 503, 504})
# one call retries those a few times, and a conflict (409: another writer came first; the next attempt
# is a fresh one) and a 500 (an internal error may pass)
RETRYABLE = TRANSIENT | {409, 500}
# what a call that got no answer raises (status 0): a connection refused, reset or cut off, a timeout, a
# failed TLS handshake. urllib3 raises its own errors for these (MaxRetryError, ProtocolError,
# ReadTimeoutError, NewConnectionError, SSLError...), none of them an OSError; http.client its own
NO_ANSWER: tuple[type[Exception], ...] = (OSError, urllib3.exceptions.HTTPError, http.client.HTTPException)


def api_client() -> k8s.ApiClient:
    """The official client on the in-cluster service account, else on KUBECONFIG (8 connections). It does
    not retry: `Kube` does, with backoff, counting each failure (urllib3's own retries resend at once, and
    log a warning each)."""
    try:
        k8s_config.load_incluster_config()
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()
    configuration = k8s.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = 8
    configuration.retries = 0
    return k8s.ApiClient(configuration)


# the cause the apiserver gives for a write into a namespace that is being deleted (403 Forbidden)
NAMESPACE_TERMINATING = "NamespaceTerminating"


class KubeError(RuntimeError):
    """An API call failed for good (after retries): carries the HTTP status, the server's message and the
    causes its Status names (details.causes[].reason)."""

    def __init__(self, status: int, message: str, causes: tuple[str, ...] = ()) -> None:
        self.status = status
        self.message = message
        self.causes = causes
        super().__init__(f"HTTP {status}: {message}")


class Replaced(KubeError):
    """A write that named the object's UID found no object of that UID: it was deleted, or another object
    of its name took its place. Not retried: the caller looks again."""


def namespace_terminating(exc: KubeError) -> bool:
    """Whether the call was refused because its namespace is being deleted (nothing to repair there)."""
    return exc.status == 403 and NAMESPACE_TERMINATING in exc.causes


def is_transient(exc: KubeError) -> bool:
    """Whether a failed call may succeed when tried again later (TRANSIENT)."""
    return exc.status in TRANSIENT


def transient_error(exc: BaseException) -> bool:
    """Whether `exc`, of any type, is a KubeError that may pass when tried again (is_transient)."""
    return isinstance(exc, KubeError) and is_transient(exc)


def no_answer(exc: BaseException) -> str:
    """The message of a call that got no answer: the error of its last attempt (urllib3's MaxRetryError
    holds it as its reason)."""
    reason = getattr(exc, "reason", None)
    cause = reason if isinstance(reason, BaseException) else exc
    return f"no answer from the API server ({type(cause).__name__}: {cause})"


METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


SELF_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    ns = f"/namespaces/{namespace}" if namespace else ""
    tail = f"/{name}" if name else ""
    return f"{base}{ns}/{plural(kind)}{tail}"


class Kube:
    """Synchronous calls (run them in a thread from async handlers). Retries 409/429/5xx with backoff."""

    def __init__(self, api: k8s.ApiClient, field_manager: str, retries: int = 5) -> None:
        self.api = api
        self.field_manager = field_manager
        self.retries = retries

    def _call(
        self,
        method: str,
        url: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> dict[str, Any]:
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        params = self.api.param_serialize(
            method=method,
            resource_path=url,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(*params, _request_timeout=30)
        data = resp.read()
        if resp.status >= 400:
            raise ApiException(status=resp.status, reason=resp.reason, http_resp=resp)
        return jsontext.loads(data) if data else {}

    def _retry(self, fn: Callable[[], T], retries: int | None = None) -> T:
        retries = self.retries if retries is None else retries
        delay = 0.2
        for attempt in range(retries + 1):
            try:
                return fn()
            except ApiException as exc:
                metrics.api_error(exc.status or 0)
                if exc.status not in RETRYABLE or attempt == retries:
                    raise KubeError(exc.status or 0, _message(exc), _causes(exc)) from None
            except NO_ANSWER as exc:  # transient, like every status 0
                metrics.api_error(0)
                if attempt == retries:
                    raise KubeError(0, no_answer(exc)) from None
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def request(
        self,
        method: str,
        url: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        retries: int | None = None,
    ) -> dict[str, Any]:
        """One call on any API path (a subresource, a dry run, a TokenRequest), retried like the others
        (`retries=0`: once); KubeError carries the status of a failure."""
        return self._retry(
            lambda: self._call(method, url, query=query, body=body, content_type=content_type), retries
        )

    def apply(
        self,
        obj: dict[str, Any],
        retries: int | None = None,
        field_manager: str | None = None,
        uid: str | None = None,
    ) -> dict[str, Any]:
        """Server-side apply under our field manager, or `field_manager` (idempotent; conflicts forced).
        With `uid`, only to the object of that UID: the API server refuses the apply when there is none
        (409) or another object has the name (422 on metadata.uid), raised as Replaced; nothing is
        created then."""
        meta = obj["metadata"]
        url = path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        query = [("fieldManager", field_manager or self.field_manager), ("force", "true")]
        body = obj if uid is None else {**obj, "metadata": {**meta, "uid": uid}}
        return self._retry(
            _replaced_if(
                uid,
                lambda: self._call(
                    "PATCH", url, query=query, body=body, content_type="application/apply-patch+yaml"
                ),
            ),
            retries,
        )

    def create(self, obj: dict[str, Any], field_manager: str | None = None) -> dict[str, Any]:
        """POST a new object (e.g. an Event, which has a generateName), its fields under `field_manager`
        when given. A field the API server's schema lacks is refused (strict validation, as a server-side
        apply refuses it), not dropped. An object of its name that exists: KubeError 409, not retried."""
        url = path(obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"))
        query = [("fieldValidation", "Strict")]
        query += [("fieldManager", field_manager)] if field_manager else []

        def attempt() -> dict[str, Any]:
            try:
                return self._call("POST", url, query=query, body=obj)
            except ApiException as exc:
                if exc.status == 409:
                    raise KubeError(409, _message(exc), _causes(exc)) from None
                raise

        return self._retry(attempt)

    def create_if_absent(self, obj: dict[str, Any]) -> bool:
        """POST an object unless one of its name exists (409: False at once, no retry, nothing read).
        For objects created once and never changed by us, such as a generated Secret."""
        url = path(obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"))

        def attempt() -> bool:
            try:
                self._call("POST", url, body=obj)
            except ApiException as exc:
                if exc.status == 409:
                    return False
                raise
            return True

        return self._retry(attempt)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self._retry(lambda: self._call("GET", path(api_version, kind, namespace, name)))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self, api_version: str, kind: str, namespace: str | None, selector: str, metadata_only: bool = False
    ) -> list[dict[str, Any]]:
        """The objects of a kind matching a label selector; `metadata_only`: their metadata alone (the
        API server sends PartialObjectMetadata: a list of large objects costs their names, not their
        contents)."""
        url = path(api_version, kind, namespace)
        accept = METADATA_LIST if metadata_only else "application/json"
        return (
            self._retry(
                lambda: self._call("GET", url, query=[("labelSelector", selector)], accept=accept)
            ).get("items")
            or []
        )  # an empty PartialObjectMetadataList has `items: null`

    def delete(
        self, api_version: str, kind: str, namespace: str | None, name: str, uid: str | None = None
    ) -> bool:
        """Delete the object (with `uid`: only the object of that UID); False when there was none."""
        url = path(api_version, kind, namespace, name)
        body = None if uid is None else {"preconditions": {"uid": uid}}
        try:
            self._retry(_replaced_if(uid, lambda: self._call("DELETE", url, body=body)))
            return True
        except KubeError as exc:
            if exc.status == 404 or isinstance(exc, Replaced):
                return False
            raise

    def patch_json(self, obj: dict[str, Any], uid: str, operations: JsonPatch) -> dict[str, Any]:
        """A JSON patch of the object of `uid` (a `test` of the UID comes first: Replaced when another
        object has the name, KubeError 404 when there is none), under our field manager."""
        meta = obj["metadata"]
        url = path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        body = [{"op": "test", "path": "/metadata/uid", "value": uid}, *operations]

        def attempt() -> dict[str, Any]:
            try:
                return self._call(
                    "PATCH",
                    url,
                    query=[("fieldManager", self.field_manager)],
                    body=body,
                    content_type="application/json-patch+json",
                )
            except ApiException as exc:
                if exc.status == 422 and not _causes(exc):  # the test failed: another object
                    raise Replaced(422, _message(exc)) from None
                raise

        return self._retry(attempt)

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch a TritonPipeline's status (retried on transient errors)."""
        url = path(API_VERSION, KIND, namespace, name) + "/status"
        body = {"status": status}
        return self._retry(
            lambda: self._call("PATCH", url, body=body, content_type="application/merge-patch+json")
        )

    def may(self, verb: str, api_version: str, kind: str, namespace: str | None) -> bool | None:
        """Whether this client's own identity may `verb` objects of `kind` in `namespace`, as the API
        server's authorizer answers a SelfSubjectAccessReview; None where it cannot be asked (403: the
        identity may not create SelfSubjectAccessReviews; 404: not served)."""
        group = api_version.rpartition("/")[0]
        attributes = {"verb": verb, "group": group, "resource": plural(kind), "namespace": namespace or ""}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        try:
            found = self.request("POST", SELF_ACCESS_REVIEWS, body=body)
        except KubeError as exc:
            if exc.status in (403, 404):
                return None
            raise
        return bool((found.get("status") or {}).get("allowed"))

    def resource_exists(self, api_version: str, kind: str) -> bool:
        """Whether the API serves this kind (e.g. a provider's CRD is installed), from discovery
        (`served_kinds`)."""
        return kind in self.served_kinds(api_version)

    def served_kinds(self, api_version: str) -> frozenset[str]:
        """The kinds the API serves at `api_version`, from discovery: a group or version it does not
        serve (404; 403 where discovery is not allowed) serves none; a transient failure (an aggregated
        API's server down: 503) is retried like every call, then KubeError, so that it is never taken for
        "not installed"."""
        url = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            resources = self._retry(lambda: self._call("GET", url)).get("resources", [])
        except KubeError as exc:
            if exc.status in (403, 404):
                return frozenset()
            raise
        # subresources (scaledobjects/status) carry their parent's kind: only the resources themselves
        return frozenset(str(r.get("kind")) for r in resources if "/" not in str(r.get("name", "")))


def _replaced_if(uid: str | None, call: Callable[[], T]) -> Callable[[], T]:
    """`call`, raising Replaced (not retried) when it named `uid` and the API server found no object of
    that UID: 409 (none of the name: an apply; another UID: a delete's precondition) or 422 on
    metadata.uid (an apply to another object of the name)."""
    if uid is None:
        return call

    def attempt() -> T:
        try:
            return call()
        except ApiException as exc:
            if exc.status == 409 or (exc.status == 422 and "metadata.uid" in _fields(exc)):
                raise Replaced(exc.status, _message(exc), _causes(exc)) from None
            raise

    return attempt


def _details(exc: ApiException) -> list[dict[str, Any]]:
    try:
        causes = (json.loads(exc.body or "{}").get("details") or {}).get("causes") or []
    except (ValueError, AttributeError):
        return []
    return [c for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []


def _fields(exc: ApiException) -> tuple[str, ...]:
    """The fields the API server's Status names (details.causes[].field)."""
    return tuple(str(c.get("field", "")) for c in _details(exc))


def _causes(exc: ApiException) -> tuple[str, ...]:
    return tuple(str(c.get("reason", "")) for c in _details(exc))


def _message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "{}").get("message") or str(exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)
