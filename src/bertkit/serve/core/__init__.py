"""The serving core (TEI's ``core``): every rule a request meets before the model sees it, and the model's batching
worker. No web framework here: nothing in this package imports FastAPI or Starlette (tests/unit/test_import_layers.py
checks it), so the rules can be read and tested without HTTP.

    errors.py    ApiError (a refusal: TEI's error type sets its status), InputRejected (named by role; the route
                 names the field), fields()
    checks.py    the checks on one input: count, blank or over-long text, token ids, answer size
    service.py   ServeSettings (the ``bertkit serve`` flags) and Service: prepare() owns every check, truncation and
                 limit; embed() and call() run the model on its worker
    batching.py  BatchQueue: the model's one worker thread and its dynamic batches
"""
