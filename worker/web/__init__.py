"""``interlude serve``: the JSON resume API and the web inbox, over the resume gateway.

Imported only by ``interlude serve`` (and tests), so the rest of interlude never loads FastAPI.
"""
