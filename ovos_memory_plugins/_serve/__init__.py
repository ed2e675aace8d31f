"""``ovos-memory serve``: a local web page and JSON API to see and remove what a memory holds.

``views`` turns a memory into what the page shows (plain functions over the memories' public
methods, no web framework); ``app`` is the Starlette application (needs the ``[serve]`` extra,
imported only by the ``serve`` command); ``static/`` holds the page.
"""
