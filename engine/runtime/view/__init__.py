"""The view: every partition of the events topic folded into stores that answer questions.

``epochq view run`` (engine/cli/view.py) runs :class:`~engine.runtime.view.follow.ViewFollower`
in a process of its own; ``epochq engine run`` and ``epochq console`` start one as a child
(:mod:`engine.runtime.view.child`); ``epochq view status`` reads its lag
(:mod:`engine.questions.view_status`). Its stores live at ``<state_dir>/<ns>/view/pNNNN``
(``projections.store.view_store_path``), one per events partition, and only one process at a
time writes them (the lock ``<state_dir>/<ns>/view.lock``).
"""
