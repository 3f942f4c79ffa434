"""Serving, in text-embeddings-inference's split: :mod:`bertkit.serve.core` (every check, limit and the batching
worker; no web framework), :mod:`bertkit.serve.http` (FastAPI routes per dialect, typed bodies, metrics, uvicorn),
:mod:`bertkit.serve.app` (``create_app``, which wires them) and :class:`~bertkit.serve.client.BertClient` (stdlib +
numpy only; it imports neither torch nor the server stack).

Nothing is imported here, so that ``from bertkit.serve.client import BertClient`` stays light.
"""
