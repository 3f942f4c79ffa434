"""Refusals in the core's terms: :class:`ApiError` carries TEI's ``error_type`` (which sets the HTTP status), a
message naming the field and the limit, and OpenAI's ``param``; the HTTP layer shapes it for each dialect.

Error statuses follow text-embeddings-inference (TEI): Empty 400, Validation/Tokenizer 422, Overloaded 429, Unhealthy
503, except that a failure of the model (Backend) is a 500 (TEI says 424) so that load balancers see a server fault.

The service knows no request field: it refuses an input with :class:`InputRejected`, which names the input by its
role (``inputs``, ``pairs``, ``layers``, ``pooling``, ``top_k``) and index; the route names the field
(:func:`fields`), so one check reads ``'texts[3]'`` under bert-as-service and ``'input[3]'`` under OpenAI.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

TEI_ERROR_TYPES = ("Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty")
STATUS_OF = {"Empty": 400, "Validation": 422, "Tokenizer": 422, "Overloaded": 429, "Unhealthy": 503, "Backend": 500}
FIELD = "{field}"  # what the checks are given as the field's name: the route names it (InputRejected.named)


class ApiError(Exception):
    """A refused or failed request: ``status`` (default from ``error_type``), a message naming the field and the
    limit, TEI's ``error_type`` and OpenAI's ``param``."""

    def __init__(self, status: int | None, message: str, error_type: str = "Validation", param: str | None = None):
        super().__init__(message)
        if error_type not in TEI_ERROR_TYPES:
            raise ValueError(f"error_type must be one of {TEI_ERROR_TYPES}, got {error_type!r}")
        self.status = STATUS_OF[error_type] if status is None else status
        self.message, self.error_type, self.param = message, error_type, param


class InputRejected(ApiError):
    """A refusal by the service, before a route names the field: ``role`` (``inputs``, ``pairs``, ``layers``,
    ``pooling``), ``index`` (None: the whole field) and a message in which ``{field}`` stands for the field."""

    def __init__(self, role: str, index: int | None, template: str, error_type: str = "Validation"):
        super().__init__(None, template, error_type)
        self.role, self.index, self.template = role, index, template

    def named(self, names: dict[str, str]) -> ApiError:
        """The refusal with its field named: ``names`` maps a role to the route's field; a name with ``{i}`` takes
        the index there (``inputs[{i}].context``), an index-less name (``"question"``) drops it."""
        name = names.get(self.role, self.role)
        if self.index is not None:
            name = name.format(i=self.index) if "{i}" in name else f"{name}[{self.index}]"
        elif "{i}" in name:  # the whole list: the field above the index
            name = name.split("[{i}]")[0]
        return ApiError(self.status, self.template.format(field=name), self.error_type, param=name)


@contextlib.contextmanager
def by_role(name: str, index: int | None = None) -> Iterator[None]:
    """The checks (:mod:`~bertkit.serve.core.checks`), run by the service: a refusal that names :data:`FIELD`
    becomes an :class:`InputRejected` of role ``name`` (and ``index``), whose field the route names."""
    try:
        yield
    except ApiError as exc:
        if FIELD not in exc.message:
            raise
        raise InputRejected(name, index, exc.message, exc.error_type) from None


@contextlib.contextmanager
def fields(single: bool = False, **names: str) -> Iterator[None]:
    """Within it, a refusal names the route's fields: ``with fields(inputs="texts"): await svc.prepare(...)``.
    ``single``: the request sent one input, not a list (``'question'``, not ``'question[0]'``)."""
    try:
        yield
    except InputRejected as exc:
        if single:
            exc.index = None
        raise exc.named(names) from None
