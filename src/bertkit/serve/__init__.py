"""Serving: the FastAPI app (:mod:`bertkit.serve.app`), the dynamic-batching worker (:mod:`bertkit.serve.batching`)
and :class:`~bertkit.serve.client.BertClient` (stdlib + numpy only; it imports neither torch nor the server stack).

Nothing is imported here, so that ``from bertkit.serve.client import BertClient`` stays light.
"""
