"""Option mode: the search environments with ``Discrete`` menus in place of free text.

``menus`` (each role's options and their features), ``wrapper`` (the AEC and parallel wrappers,
and ``play_options``, one episode with a chooser), ``vector`` (batched episodes over the text
environments, transitions cached), ``fast`` (a second implementation of the workflows' rules over
per-world tables, replay-tested against the text environments; what the trainer uses), ``scenarios``
(the registered ``synthwiki_v1`` and ``lazy_searcher_v1`` set-ups) and ``single_role`` (one role
as a Gymnasium env, the others played by fixed policies).
"""
