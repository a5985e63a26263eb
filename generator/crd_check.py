"""A structural check of the cert-manager objects the manifests hold.

Why: kubernetes-validate bundles the schemas of built-in kinds only, so Issuer and
Certificate (CRDs) would pass unchecked. These JSON schemas are written from cert-manager's
Go types, ``cert-manager/cert-manager`` ``pkg/apis/certmanager/v1/types_certificate.go``
and ``types_issuer.go`` (plus ``pkg/apis/meta/v1`` for ``issuerRef``): field names, the
required fields (``secretName``, ``issuerRef.name``), the enums (private key algorithm,
encoding, rotation policy, key usages) and ECDSA sizes. Unknown fields are refused, as
the API server's structural-schema pruning would silently drop them.
"""

from __future__ import annotations

from typing import Any

import jsonschema

_STR_LIST = {"type": "array", "items": {"type": "string"}}
_KEY_USAGES = [
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement",
    "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any",
    "server auth", "client auth", "code signing", "email protection", "s/mime",
    "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
    "microsoft sgc", "netscape sgc",
]
_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}

_METADATA = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "additionalProperties": False,
}

_CERTIFICATE_SPEC = {
    "type": "object",
    "required": ["secretName", "issuerRef"],
    "additionalProperties": False,
    "properties": {
        "subject": {"type": "object"},
        "commonName": {"type": "string", "maxLength": 64},
        "duration": _DURATION,
        "renewBefore": _DURATION,
        "dnsNames": _STR_LIST,
        "ipAddresses": _STR_LIST,
        "uris": _STR_LIST,
        "emailAddresses": _STR_LIST,
        "secretName": {"type": "string", "minLength": 1},
        "secretTemplate": {"type": "object"},
        "keystores": {"type": "object"},
        "issuerRef": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "kind": {"type": "string"},
                "group": {"type": "string"},
            },
        },
        "isCA": {"type": "boolean"},
        "usages": {"type": "array", "items": {"enum": _KEY_USAGES}},
        "privateKey": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "rotationPolicy": {"enum": ["Never", "Always"]},
                "encoding": {"enum": ["PKCS1", "PKCS8"]},
                "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                "size": {"type": "integer"},
            },
            "if": {"properties": {"algorithm": {"const": "ECDSA"}}, "required": ["algorithm"]},
            "then": {"properties": {"size": {"enum": [256, 384, 521]}}},
        },
        "encodeUsagesInRequest": {"type": "boolean"},
        "revisionHistoryLimit": {"type": "integer", "minimum": 1},
    },
    "anyOf": [{"required": ["commonName"]}, {"required": ["dnsNames"]},
              {"required": ["uris"]}, {"required": ["ipAddresses"]}],
}

_ISSUER_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "maxProperties": 1,  # exactly one issuer type
    "properties": {
        "acme": {"type": "object"},
        "ca": {"type": "object", "required": ["secretName"]},
        "vault": {"type": "object"},
        "selfSigned": {"type": "object", "properties": {"crlDistributionPoints": _STR_LIST},
                       "additionalProperties": False},
        "venafi": {"type": "object"},
    },
}

SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    (kind, "cert-manager.io/v1"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "cert-manager.io/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
    }
    for kind, spec in (("Certificate", _CERTIFICATE_SPEC), ("Issuer", _ISSUER_SPEC))
}


def has_schema(obj: dict[str, Any]) -> bool:
    return (obj.get("kind"), obj.get("apiVersion")) in SCHEMAS


def check(obj: dict[str, Any]) -> list[str]:
    """Every structural problem of a cert-manager object, as ``path: message`` lines."""
    schema = SCHEMAS.get((obj.get("kind"), obj.get("apiVersion")))
    if schema is None:
        return [f"no structural schema for {obj.get('apiVersion')} {obj.get('kind')}"]
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in errors]
