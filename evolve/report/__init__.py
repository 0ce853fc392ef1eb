"""``evolve report``: a static, offline HTML site of one run of an archive.

Why a package of its own: the report is read-only over the archive (``evolve.archive``)
and knows nothing of the search's internals; its builders turn archive rows into plain data
per page (``overview``, ``frontier``, ``program``, ``lineage``, ``llmlog``, ``validation``;
unit-tested without HTML), ``charts``/``svg``/``highlight`` turn that data into inline SVG
and HTML, and ``site`` writes the pages (jinja2 templates in ``templates/``). See
docs/report.md.
"""

from evolve.report.site import LiveReport, Options, Written, build_site, watch, write_report

__all__ = ["LiveReport", "Options", "Written", "build_site", "watch", "write_report"]
