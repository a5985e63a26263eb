"""AdmissionReview in, AdmissionReview out: the wire format of ``admission.k8s.io/v1``.

Why a module of its own: everything the API server (or a hostile client) sends passes
through :func:`parse_review` first. It checks the shape of every field the pipeline later
reads, so the rest of the webhook can trust its input and never crash on it; anything that
does not fit raises :class:`BadReview`, which the server answers with HTTP 400.

The response side (:func:`build_response`) echoes ``request.uid`` and carries the RFC 6902
patch base64-encoded, only when there is something to patch.

Why orjson, and when not: every review is decoded once and its answer encoded once, on the
one admitter thread; orjson does both 2-3x faster than the standard library. It is used only
where the result is the same: a body with a run of 19 or more digits (an integer orjson
would turn into a float instead of keeping it exact) or that orjson refuses (a BOM, UTF-16,
a lone surrogate, a number too large for a double) goes to ``json.loads`` exactly as before,
so what is accepted, refused and parsed does not change. The patch keeps the standard
library's bytes (ASCII escapes, Python's float spelling) unless orjson's are provably the
same: an ASCII patch with no number that could be spelled differently.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import orjson

from gputopo.errors import InputError
from webhook.podshape import check_pod

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

Outcome = Literal["mutated", "unchanged", "skipped", "denied"]


class BadReview(InputError):
    """The body is not a well-formed ``admission.k8s.io/v1`` AdmissionReview."""

    def __init__(self, reason: str, *, path: str | None = None) -> None:
        self.path = path
        # the reason usually names the field already; say it once in the one-line message
        super().__init__(reason, obj=None if path and path in reason else path)


class GroupVersionKind(NamedTuple):
    group: str
    version: str
    kind: str


class GroupVersionResource(NamedTuple):
    group: str
    version: str
    resource: str


@dataclass(frozen=True)
class AdmissionRequest:
    """The parts of ``request`` the pipeline uses, typed and checked."""

    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str
    operation: str
    namespace: str
    name: str
    object: dict[str, Any] | None
    dry_run: bool = False

    @property
    def is_pod_create(self) -> bool:
        """True only for CREATE of the ``pods`` resource itself (no subresource)."""
        return (self.operation == "CREATE" and self.kind.group == "" and self.kind.kind == "Pod"
                and self.resource.group == "" and self.resource.resource == "pods"
                and not self.sub_resource)


@dataclass
class Decision:
    """What the pipeline decided for one request; :func:`build_response` renders it."""

    allowed: bool = True
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    message: str = ""
    outcome: Outcome = "skipped"


# --- parsing ------------------------------------------------------------------------------
def _get(obj: Mapping[str, Any], key: str, kind: type, path: str, *,
         required: bool = True) -> Any:
    """``obj[key]`` if it has type ``kind`` (JSON booleans are not numbers or strings);
    None when absent and not required; BadReview otherwise."""
    value = obj.get(key)
    if value is None:
        if required:
            raise BadReview(f"missing {path}", path=path)
        return None
    if (kind is not bool and isinstance(value, bool)) or not isinstance(value, kind):
        want = {dict: "a mapping", str: "a string", bool: "a boolean"}.get(kind, kind.__name__)
        raise BadReview(f"{path} has the wrong type (expected {want}, got "
                        f"{type(value).__name__})", path=path)
    return value


#: (key, type, required) of the fields of ``request`` the pipeline reads, and of its
#: ``kind`` and ``resource``: checked by one loop each (:func:`_checked`)
_REQUEST_FIELDS = (("uid", str, True), ("kind", dict, True), ("resource", dict, True),
                   ("subResource", str, False), ("operation", str, True),
                   ("namespace", str, False), ("name", str, False), ("dryRun", bool, False),
                   ("object", dict, False))
_KIND_FIELDS = (("group", str, False), ("version", str, True), ("kind", str, True))
_RESOURCE_FIELDS = (("group", str, False), ("version", str, True), ("resource", str, True))


def _checked(obj: Mapping[str, Any], fields: tuple[tuple[str, type, bool], ...],
             path: str) -> Mapping[str, Any]:
    """``obj``, once each of ``fields`` is :func:`_get`'s answer for it (a value of its
    type, or absent when not required). Why a table: every review passes here, and one
    loop costs a fraction of a call per field."""
    for key, kind, required in fields:
        value = obj.get(key)
        if value is None:
            if required:
                raise BadReview(f"missing {path}.{key}", path=f"{path}.{key}")
        elif (kind is not bool and isinstance(value, bool)) or not isinstance(value, kind):
            _get(obj, key, kind, f"{path}.{key}")  # raises, worded as for any field
    return obj


def _no_constants(name: str) -> Any:
    """NaN and Infinity are not JSON (RFC 8259); Python would accept them by default."""
    raise ValueError(f"{name} is not a JSON value")


#: Every digit as "0" (and "E" as "e"), the rest unchanged: with it, "a run of 19 digits"
#: and "a digit before an exponent" are plain substring tests, done in C (a regular
#: expression took longer than the orjson parse it guards).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789E", b"000000000e")
#: An integer of 19 or more digits may lie outside 64 bits, where orjson returns a float.
_LONG_NUMBER = b"0" * 19


def decode_json(body: bytes | str) -> Any:
    """The JSON value of ``body``, exactly as ``json.loads`` (NaN and Infinity refused)
    returns it; orjson when it is sure to agree, else the standard library."""
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    if _LONG_NUMBER not in raw.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # let the standard library accept it or say what is wrong, as before
    return json.loads(body, parse_constant=_no_constants)


def parse_review(body: bytes | str) -> AdmissionRequest:
    """Parse and check an AdmissionReview body; :class:`BadReview` says what is wrong."""
    try:
        doc = decode_json(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadReview(f"body is not JSON: {exc}") from exc
    return checked_request(doc)


def checked_request(doc: Any) -> AdmissionRequest:
    """The request of a decoded review (``doc``: what :func:`decode_json` returned), every
    field checked one by one; :class:`BadReview` names the first that is wrong."""
    if not isinstance(doc, dict):
        raise BadReview("body is not a JSON object")
    api_version = doc.get("apiVersion")
    if api_version != API_VERSION:
        raise BadReview(f"apiVersion must be {API_VERSION!r}, got {api_version!r}",
                        path="apiVersion")
    if doc.get("kind") != KIND:
        raise BadReview(f"kind must be {KIND!r}, got {doc.get('kind')!r}", path="kind")
    req = _checked(_get(doc, "request", dict, "request"), _REQUEST_FIELDS, "request")
    uid, obj = req["uid"], req.get("object")
    if not uid:
        raise BadReview("request.uid is empty", path="request.uid")
    raw_kind = _checked(req["kind"], _KIND_FIELDS, "request.kind")
    kind = GroupVersionKind(raw_kind.get("group") or "", raw_kind["version"], raw_kind["kind"])
    raw_res = _checked(req["resource"], _RESOURCE_FIELDS, "request.resource")
    resource = GroupVersionResource(raw_res.get("group") or "", raw_res["version"],
                                    raw_res["resource"])
    sub_resource = req.get("subResource") or ""
    operation = req["operation"]
    namespace = req.get("namespace") or ""
    name = req.get("name") or ""
    dry_run = req.get("dryRun") or False
    request = AdmissionRequest(
        uid=uid, kind=kind, resource=resource, sub_resource=sub_resource,
        operation=operation, namespace=namespace, name=name, object=obj, dry_run=dry_run,
    )
    if request.is_pod_create:
        if obj is None:
            raise BadReview("missing request.object (the Pod to create)", path="request.object")
        if obj.get("kind") != "Pod" or obj.get("apiVersion") != "v1":
            raise BadReview(
                f"request.object is not a v1 Pod (apiVersion={obj.get('apiVersion')!r}, "
                f"kind={obj.get('kind')!r})", path="request.object",
            )
    elif operation in ("CREATE", "UPDATE") and obj is None:
        raise BadReview(f"missing request.object for {operation}", path="request.object")
    return request


def check_pod_object(pod: dict[str, Any]) -> None:
    """BadReview unless the Pod of a Pod CREATE has the shape the pipeline relies on
    (:func:`webhook.podshape.check_pod`), naming the field under ``request.object``.

    Why not in :func:`parse_review`: the pipeline calls this once it knows it will read the
    pod (a job pod in an opted-in namespace). A pod it lets through untouched is never read
    past its namespace and owner, so its shape is the API server's business; checking it
    cost a third of an out-of-scope review (``git show 5b1c38e:docs/benchmarks.md``,
    "Solver state kept across gangs")."""
    problem = check_pod(pod)
    if problem is not None:
        where, reason = problem
        raise BadReview(reason, path=f"request.object{where}")


# --- responding ---------------------------------------------------------------------------
#: In orjson's output, the only spellings of a float that differ from Python's: exponents
#: (``1e16`` vs ``1e+16``) and small numbers Python writes with one (``0.00001`` vs
#: ``1e-05``: "0.0000"). Checked on 1.2 million random doubles; a false alarm (the same
#: bytes in a string) only costs the json.dumps this replaces.
_SMALL = b"0.0000"
#: Digits, ".", "-" and "+" as "0", "E" as "e": a number with an exponent becomes a run of
#: "0" then "e", right after the ":", "," or "[" that starts a JSON value.
_NUMBER_AS_ZEROS = bytes.maketrans(b"123456789.-+E", b"000000000000e")


def _has_exponent(doc: bytes) -> bool:
    """True when a JSON number of ``doc`` (orjson's output) has an exponent; hex in strings
    ("...7e", uids) is not mistaken for one, a string like ":1e" only costs json.dumps."""
    zeros = doc.translate(_NUMBER_AS_ZEROS)
    at = zeros.find(b"0e")
    while at >= 0:
        start = at
        while start > 0 and zeros[start - 1] == 0x30:  # back over the number's "0"s
            start -= 1
        if start > 0 and zeros[start - 1] in b":,[":
            return True
        at = zeros.find(b"0e", at + 2)
    return False


def encode_patch_json(patch: list[dict[str, Any]]) -> bytes:
    """The JSON bytes of the patch, byte for byte what
    ``json.dumps(patch, separators=(",", ":"))`` writes."""
    try:
        fast = orjson.dumps(patch)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, an integer over 64 bits
        fast = b""
    # ASCII only (json.dumps escapes the rest, and DEL); no \u escapes (spelled alike, but
    # not worth proving); no null (orjson's spelling of NaN and Infinity too)
    if (fast and fast.isascii() and b"\x7f" not in fast and b"\\u" not in fast
            and b"null" not in fast and _SMALL not in fast and not _has_exponent(fast)):
        return fast
    return json.dumps(patch, separators=(",", ":")).encode()


def encode_patch(patch: list[dict[str, Any]]) -> str:
    """The base64 of the JSON patch, as ``response.patch`` carries it."""
    return base64.b64encode(encode_patch_json(patch)).decode()


def build_response(uid: str, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview answer for ``uid``; a patch only when allowed and non-empty."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if decision.allowed and decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = encode_patch(decision.patch)
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    if not decision.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden",
                              "message": decision.message or "denied by gputopo"}
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
