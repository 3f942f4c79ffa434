"""The HTTP layer (TEI's ``router``), on FastAPI and uvicorn: typed request bodies (``bodies``), a route class and an
error shape per dialect (``routing``, ``errors``), the ``Guard`` middleware, ``prometheus_client`` metrics, JSON
answers, uvicorn with its connection limits (``server``), and one module of routes per dialect, each only mapping
its shapes onto :mod:`bertkit.serve.core`. :func:`bertkit.serve.app.create_app` wires them.
"""
