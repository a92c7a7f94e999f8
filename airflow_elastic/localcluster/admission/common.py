"""Name and value checks shared by the admission plugins, with apimachinery's exact error messages."""

from __future__ import annotations

import re

from airflow_elastic.localcluster import errors

Causes = list[dict[str, str]]

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _too_long(limit: int) -> str:
    return f"must be no more than {limit} characters"


def dns1035_label(value: str) -> list[str]:
    """``validation.IsDNS1035Label``."""
    found = []
    if len(value) > 63:
        found.append(_too_long(63))
    if not _DNS1035.match(value):
        found.append(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
            "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
            "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )
    return found


def dns1123_label(value: str) -> list[str]:
    """``validation.IsDNS1123Label``."""
    found = []
    if len(value) > 63:
        found.append(_too_long(63))
    if not _DNS1123_LABEL.match(value):
        found.append(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
            "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        )
    return found


def dns1123_subdomain(value: str) -> list[str]:
    """``validation.IsDNS1123Subdomain``."""
    found = []
    if len(value) > 253:
        found.append(_too_long(253))
    if not _DNS1123_SUBDOMAIN.match(value):
        found.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    return found


def label_value(value: str) -> list[str]:
    """``validation.IsValidLabelValue``."""
    found = []
    if len(value) > 63:
        found.append(_too_long(63))
    if not _LABEL_VALUE.match(value):
        found.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
            "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )
    return found


def qualified_name(value: str) -> list[str]:
    """``validation.IsQualifiedName`` (label keys, condition types): ``[prefix/]name``."""
    prefix, _, name = value.rpartition("/")
    found = []
    if prefix:
        found += dns1123_subdomain(prefix)
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        found.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return found


def domain_prefixed_path(path: str, value: str) -> Causes:
    """``validation.IsDomainPrefixedPath``: ``example.com/path``."""
    if not value:
        return [errors.cause(path, "Required value", "FieldValueRequired")]
    domain, sep, rest = value.partition("/")
    if not sep or not rest:
        return [errors.cause(path, f'Invalid value: "{value}": must be a domain-prefixed path (such as "acme.io/foo")')]
    return [errors.cause(path, f'Invalid value: "{value}": {m}') for m in dns1123_subdomain(domain)]


def invalid(path: str, value: object, message: str) -> dict[str, str]:
    """A ``FieldValueInvalid`` cause in field.Error's wording."""
    shown = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else value
    return errors.cause(path, f"Invalid value: {shown}: {message}")


def required(path: str) -> dict[str, str]:
    return errors.cause(path, "Required value", "FieldValueRequired")


def immutable(path: str, message: str = "field is immutable") -> dict[str, str]:
    return errors.cause(path, f"Invalid value: {message}")


def labels_causes(path: str, labels: dict[str, str] | None) -> Causes:
    """Label keys and values as ``ValidateLabels`` checks them."""
    causes = []
    for key, value in (labels or {}).items():
        causes += [invalid(path, key, m) for m in qualified_name(key)]
        if not isinstance(value, str):
            causes.append(invalid(f"{path}[{key}]", value, "label values must be strings"))
            continue
        causes += [invalid(f"{path}[{key}]", value, m) for m in label_value(value)]
    return causes
