"""The paper's study on the testbed: the gates that decide whether a comparison can be posed
(``gates``) and their measurement on dev (``tuning``), the pre-registration (``preregistration``)
and the report built from its runs (``report``). The commands are ``maopd tune``, ``maopd
preregister`` and ``maopd report``."""
