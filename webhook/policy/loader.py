"""A directory of policy files → the ordered policy set, or every error in it.

Why a whole-set load: policies interact (order, merge), so a set is accepted or rejected
as one; a reload that fails leaves the previous set in force (see ``store.py``).
Only ``*.yaml`` / ``*.yml`` files directly in the directory are read, never hidden entries:
a mounted ConfigMap keeps its real files under ``..data`` / ``..<timestamp>`` and exposes
them as top-level symlinks, and test cases live in sub-folders.
"""

from __future__ import annotations

from pathlib import Path

from gputopo.errors import PolicyError
from gputopo.yamlio import load_documents
from webhook.policy.schema import Policy
from webhook.policy.validate import validate_document


class PolicySetError(PolicyError):
    """Several policy errors; ``line()`` lists them all on one line."""

    def __init__(self, errors: list[PolicyError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.reason, file=first.file, obj=first.obj)

    def line(self) -> str:
        lines = [e.line() for e in self.errors]
        if len(lines) == 1:
            return lines[0]
        return f"{len(lines)} policy errors: " + "; ".join(lines)


def policy_files(directory: Path) -> list[Path]:
    """The policy files of a directory, sorted by name."""
    try:
        if not directory.is_dir():
            raise PolicyError("policy directory does not exist", file=str(directory))
        return sorted(
            p for p in directory.iterdir()
            if not p.name.startswith(".") and p.suffix in (".yaml", ".yml") and p.is_file()
        )
    except OSError as exc:  # a parent without search permission, say
        raise PolicyError(f"cannot read: {exc.strerror}", file=str(directory)) from exc


def order(policies: list[Policy]) -> list[Policy]:
    """The merge order: ascending ``spec.priority``, then name."""
    return sorted(policies, key=lambda p: (p.priority, p.name))


def load_policies(directory: Path) -> list[Policy]:
    """Load and validate every policy of ``directory``; PolicySetError lists all problems."""
    errors: list[PolicyError] = []
    policies: list[Policy] = []
    seen: dict[str, str] = {}
    for path in policy_files(directory):
        try:
            docs = load_documents(path)
        except PolicyError as exc:
            errors.append(exc)
            continue
        except Exception as exc:  # InputError from the YAML loader
            errors.append(PolicyError(getattr(exc, "reason", str(exc)), file=str(path),
                                      obj=getattr(exc, "obj", None)))
            continue
        for k, doc in enumerate(docs):
            source = str(path) if len(docs) == 1 else f"{path}#{k + 1}"
            policy, errs = validate_document(doc, source=source)
            errors.extend(errs)
            if policy is None:
                continue
            if policy.name in seen:
                errors.append(PolicyError(f"duplicate policy name (also in {seen[policy.name]})",
                                          file=source, obj="metadata.name"))
                continue
            seen[policy.name] = source
            policies.append(policy)
    if not errors and not policies:
        # An empty directory is a broken mount or a wrong path far more often than a wish:
        # a webhook that is ready but does nothing would hide it.
        errors.append(PolicyError("no policy document (*.yaml) found", file=str(directory)))
    if errors:
        raise PolicySetError(errors)
    return order(policies)
