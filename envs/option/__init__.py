"""Option mode: the search environments with ``Discrete`` menus in place of free text.

``menus`` (each role's options and their features), ``wrapper`` (the AEC and parallel wrappers,
and ``play_options``, one episode with a chooser), ``vector`` (batched episodes), ``lean`` (the
text environments without their AEC bookkeeping: fast, identical transitions), ``scenarios``
(the registered ``synthwiki_v1`` and ``lazy_searcher_v1`` set-ups) and ``single_role`` (one role
as a Gymnasium env, the others played by fixed policies).
"""
